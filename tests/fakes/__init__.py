"""Local test doubles (127.0.0.1 only): an OpenAI-compatible streaming server and a Kubernetes API server."""
