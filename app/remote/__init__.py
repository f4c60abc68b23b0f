"""The desktop app as a client of a remote speech engine (`python main.py serve`)."""
