"""The OpenAI request path: protocol models, the serving base with chat and completion serving
on its chunk layer and Responses serving beside it, response framing, text handling (chat
template, incremental detokenisation, stop strings) and tool calling."""
