"""XLA's own files: its dumps of compiled programs."""
