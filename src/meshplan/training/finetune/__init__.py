"""LoRA and QLoRA fine-tuning.

- adapters.py      what adapters change against full training in states, traffic and work
- profile_lora.py  what a layer saves for backward with a frozen base and trained adapters
"""
