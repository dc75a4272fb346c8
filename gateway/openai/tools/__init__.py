"""OpenAI tool calling: the request's tools (`spec`), the target's wire format and how a
conversation with tools is rendered (`formats`), the grammar that enforces `required` and named
choices (`grammar`), and parsing generated text back into calls, whole or streamed (`parse`)."""
