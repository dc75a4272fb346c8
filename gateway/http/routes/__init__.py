"""Thin HTTP routes: validate (pydantic), fetch the service from `app.state`, call one method."""
