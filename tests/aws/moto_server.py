"""The moto server the tests start (tests/aws/moto.sh), with DynamoDB's actions taken one at a
time.

Real DynamoDB applies a conditional write atomically: of two `UpdateItem`s racing on one item
under `attribute_not_exists(holder)`, one wins and the other gets
`ConditionalCheckFailedException`. moto's threaded server checks the condition and writes
without a lock, so under concurrent requests both could win (measured: 3 to 5 keys of 200 had
two winners), and the lease test of two overlapping invokes
(`functions/tests/runtime.rs`) then saw two holders, a failure of the test double, not of the
lease. Serialising DynamoDB's actions makes the double keep the guarantee the lease relies
on; `tests/aws/conditional_race.py` checks it. The other services are left concurrent.

Usage: python moto_server.py [moto_server's arguments], e.g. -H 127.0.0.1 -p 5000.
"""

import sys
import threading

from moto.dynamodb.responses import DynamoHandler
from moto.server import main

_ONE_AT_A_TIME = threading.Lock()
_call_action = DynamoHandler.call_action


def _serialised(self, *args, **kwargs):
    with _ONE_AT_A_TIME:
        return _call_action(self, *args, **kwargs)


DynamoHandler.call_action = _serialised

if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
