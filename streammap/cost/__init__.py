"""Estimates: the cost model of a task graph on a cluster (:mod:`.model`), the performance history of
measured kernel times (:mod:`.history`), and ``streammap profile``, which fills it (:mod:`.calibrate`)."""
