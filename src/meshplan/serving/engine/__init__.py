"""The serving engine model: replicas, their scheduler and KV cache, and the router.

- deployment.py  build a deployment's replicas: defaults, KV blocks, costs, scheduler rules
- defaults.py    default knobs of vLLM V1, SGLang and TensorRT-LLM for a GPU
- scheduler.py   each engine's scheduling rules, as data
- replica.py     one replica: its queue, KV blocks and the iteration loop
- sequence.py    the engine-side state of one request
- decodeset.py   the decoding requests of a replica, advanced together
- kvcache.py     the KV block pool with prefix caching
- kvtier.py      a CPU tier under the GPU KV cache
- iterations.py  IterationLog: one row per engine iteration
- router.py      how requests are spread over replicas
"""
