"""What a person reads: tables, summaries and pictures of plans and run records (:mod:`.show`), and the
self-contained HTML run report (:mod:`.report`)."""
