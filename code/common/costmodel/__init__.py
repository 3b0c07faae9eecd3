"""The cost model every lecture prices with, one package and no re-exports (import each name from
its module): `collectives` every collective and the algorithms that run it (what each position sends,
in how many rounds, and its α-β time), `link` the links the notes name and the link a measured line
of times means, `steps` a training step's collectives and CS336's per-step traffic (DDP, ZeRO, TP,
PP). Questions one lecture asks of it live in that lecture (lecture14/costmodel.py,
cs336/first_order.py)."""
