"""Placement rules that constrain every mapper: GPU sharing by fraction (:mod:`.sharing`), co-location of
a stateful kernel's calls (:mod:`.colocate`), and memory oversubscription with spilling (:mod:`.spilling`)."""
