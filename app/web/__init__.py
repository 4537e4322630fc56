"""HTTP routers: annotator pages, researcher dashboard, REST API. Handlers only."""
