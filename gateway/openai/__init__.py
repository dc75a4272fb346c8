"""The OpenAI request path: protocol models, chat and completion serving, response framing,
text handling (chat template, incremental detokenisation, stop strings) and tool calling."""
