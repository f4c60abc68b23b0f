"""The engine's wire protocol, shared by the server (app/server) and its clients (the desktop
app's RemoteEngine in app/remote, benchmarks): the JSON events and the WebSocket client."""
