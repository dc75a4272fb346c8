"""The HTTP edge, the gateway's top layer below the entry points: thin routes (the admin page's
included), middleware, auth, rate limit and the FastAPI dependencies the routes read."""
