"""Pipeline schedules: who runs which forward and backward when.

- orders.py     schedules as op orders per stage (1F1B, interleaved, GPipe, zero-bubble)
- simulate.py   the schedule simulator: step time, bubble, in-flight activations
- schedules.py  micro-batches a schedule keeps alive per stage
- peak_walk.py  a stage's activation peak from walking its op order
"""
