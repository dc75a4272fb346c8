"""The HTTP edge: thin routes, middleware, auth, rate limit, error responses, metrics and the
FastAPI dependencies the routes read."""
