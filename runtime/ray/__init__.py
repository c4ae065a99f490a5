"""The Ray backend: one actor per plan device (:mod:`.executor`), monitored from the driver
(:mod:`.monitor`), with sharing (:mod:`.sharing`) and spilling (:mod:`.spill`) inside each actor and
CUDA IPC hand-offs between the actors of one node (:mod:`.ipc`)."""
