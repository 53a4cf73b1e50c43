"""One Textual widget per module; each panel renders one part of a Snapshot."""
