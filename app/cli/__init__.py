"""The command line: `python main.py [command]` (main.py); `serve`, `eval` and `train`
have their parsers beside their code (app/server/cli.py, app/eval/cli.py,
app/training/cli.py), `plan` here (plan_command.py)."""
