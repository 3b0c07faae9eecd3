"""The reproduction's and the tests' machinery, beside reproduce.py: no script imports it at run time.

`suite.py` the scripts as the reproduce command, the benchmarks and the tests see them;
`prestarted.py` (and `prestarted_serve.py`, the forked interpreter's side) runs scripts in processes
forked from an interpreter that imported torch once; `lanes.py` runs the model-only scripts in a
lane of their own beside the ones that start ranks; `errata.py` groups the notes' errors for the
list, the pages and docs/errata.md.
"""
