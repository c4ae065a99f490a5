"""Files in and out: atomic writes (:mod:`.files`), YAML with line numbers (:mod:`.yamlfile`), and
task graphs imported from JSON that nobody wrote for StreamMAP (:mod:`.importers`)."""
