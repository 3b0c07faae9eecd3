"""Problem 113 that replaces the judge's encoder in its own process and sends reports the judge's
decoder must refuse without ending the run (from the review: each of them ended it with one
`judge.py: error:` line). Which report is chosen by the bucket case's cap:
  cap 12 MB   JSON nested 20,000 deep (RecursionError)
  cap 4       a tensor of shape [-1, -2] (torch's "invalid shape dimension")
  cap 0       a tensor of dtype qint8 (torch cannot build it from a list)
  cap 1000    {"fail": "x"}: a failure that is not a dict
  otherwise   the real answer's report, so those cases are judged as usual."""

import judging.plain
from lecture15.ddp_sim import assign_buckets as _model_buckets

_real_dumps = judging.plain.dumps
_chosen = {"report": None}
_REPORTS = {
    12 * 10**6: b"[" * 20000 + b"]" * 20000,
    4: b'{"$":"dict","items":[["data",{"$":"tensor","dtype":"float64","shape":[-1,-2],"values":[1.0,2.0]}]]}',
    0: b'{"$":"dict","items":[["data",{"$":"tensor","dtype":"qint8","shape":[2],"values":[1,2]}]]}',
    1000: b'{"$":"dict","items":[["fail","x"]]}',
}


def _dumps(value):
    return _chosen["report"] or _real_dumps(value)


judging.plain.dumps = _dumps


def assign_buckets(sizes, cap, first=None):
    _chosen["report"] = _REPORTS.get(cap)
    return _model_buckets(sizes, cap, first)


def allreduce_time(*args):
    return 0.0


def timeline(*args):
    return None
