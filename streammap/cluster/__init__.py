"""The cluster: its model (:mod:`.model`: nodes, devices, links, the cluster file), discovery of this
machine (:mod:`.discover`, NVML; :mod:`.rocm`, AMD and Hygon), of a Ray cluster (:mod:`.ray`), and
``streammap doctor`` (:mod:`.doctor`)."""
