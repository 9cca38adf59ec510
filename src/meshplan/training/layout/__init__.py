"""A TrainingPlan against a model and a cluster: checked, completed, placed.

- resolve.py       check a plan, fill what the user left open (ResolvedPlan, PlanError)
- capabilities.py  what each framework can launch (the table the search and exporters share)
- groups.py        where each parallel group (TP, CP, EP, DP, PP) sits on the cluster
"""
