"""The desktop app (PySide6). One widget per file; the GUI thread only draws."""
