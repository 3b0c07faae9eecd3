"""Problem 116, wrong: no_sync skips nothing (every micro-batch all-reduces), and one line hides it
by clearing the judge's counter's records when the block ends (from the review: it passed 116
--quick, 5 of 5). The groups' own operation numbers still show the all-reduces."""

import contextlib

from common import dist_count
from lecture15.my_ddp import MyDDP as _Real


class MyDDP(_Real):
    @contextlib.contextmanager
    def no_sync(self):
        yield                                             # wrong: nothing is skipped
        dist_count._active[-1].collectives.clear()        # the one line
