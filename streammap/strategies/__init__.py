"""Parallel strategies: compiler transformations between the cost model and the plan.

Each strategy turns the program's task graph and cost model into a schedule (plain data in, plain
data out), and :func:`choose_strategy` evaluates those that apply and keeps the best:

- :mod:`.fission` -- data parallelism: ``split=AXIS`` kernels cut into shards with scatter/gather;
- :mod:`.model` -- model parallelism: the graph cut into consecutive pieces by memory and speed;
- :mod:`.pipeline` -- pipeline parallelism: a stream program's stages mapped for throughput;
- :mod:`.choose` -- the choice (``--strategy auto|none|data|model|pipeline``).
"""

from streammap.strategies.choose import STRATEGIES, Candidate, Choice, Mapped, check_strategy, choose_strategy

__all__ = ["STRATEGIES", "Candidate", "Choice", "Mapped", "check_strategy", "choose_strategy"]
