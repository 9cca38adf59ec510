"""Time of one op on one GPU; time of one collective on a group."""
