"""The reproduction as pages: `pages` writes report/index.html and report.md from the scripts'
--json; three pages to play with, each also written alone by `python code/report/<page>.py OUT_DIR`
(`page_cli`): `timeline` (the handbook's DDP overlap, from timelines lecture15.timeline_grid
precomputes), `pipeline` (CS336's schedules, a JS copy of cs336/pipeline.py) and `memory` (the ledger
with ZeRO, TP and PP, a JS copy of report/memory.setting_numbers); each JS copy is held equal to the
Python model for every setting its page offers (tests/report/test_*_model.py)."""
