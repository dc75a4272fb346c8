"""Speed benchmarks: what a pass, a step, a round and a served request cost (engine, forward,
verification head, canonical numerics, structured outputs, the gateway's overhead, a peer
server), and the CPU defaults chosen from them."""
