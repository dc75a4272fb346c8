"""Thin HTTP routes: validate (pydantic), take the service as a typed dependency
(`gateway.http.deps`), call one method."""
