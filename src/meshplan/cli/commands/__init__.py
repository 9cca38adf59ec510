"""The command modules, one per root command or sub-command family, each imported on first use
(meshplan.cli.lazy): validate, calibrate, record, models, gpus, cluster, train (train_plan,
train_export), serve (serve_plan), ui."""
