"""Dataset readers (local files in their standard formats; download only when asked)."""
