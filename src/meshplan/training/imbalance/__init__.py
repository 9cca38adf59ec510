"""Uneven work: the slowest rank sets the pace.

- doclengths.py  document-length distributions of a corpus (named or from a file)
- packing.py     documents packed into sequences; attention work per rank
- routing.py     MoE routing skew: the busiest expert and expert-parallel rank
- report.py      the imbalance figures a step estimate reports
"""
