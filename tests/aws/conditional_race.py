"""Checks that the moto server the tests start keeps DynamoDB's conditional writes atomic:
two threads race a conditional `UpdateItem` on each of KEYS fresh items, and exactly one must
win each race. Fails (exit 1) naming how many items had two winners or none.

Usage: python conditional_race.py ENDPOINT_URL [KEYS]
"""

import sys
import threading
import uuid

import boto3


def client(url):
    return boto3.client(
        "dynamodb",
        endpoint_url=url,
        region_name="us-east-1",
        aws_access_key_id="testing",
        aws_secret_access_key="testing",
    )


def main():
    url = sys.argv[1]
    keys = int(sys.argv[2]) if len(sys.argv) > 2 else 100
    table = f"skipprd-race-{uuid.uuid4().hex[:8]}"
    db = client(url)
    db.create_table(
        TableName=table,
        KeySchema=[{"AttributeName": "pk", "KeyType": "HASH"}],
        AttributeDefinitions=[{"AttributeName": "pk", "AttributeType": "S"}],
        BillingMode="PAY_PER_REQUEST",
    )
    racers = [client(url) for _ in range(2)]
    wrong = []
    try:
        for k in range(keys):
            wins = []

            def take(who, c, k=k, wins=wins):
                try:
                    c.update_item(
                        TableName=table,
                        Key={"pk": {"S": f"k{k}"}},
                        UpdateExpression="SET holder = :h",
                        ConditionExpression="attribute_not_exists(holder)",
                        ExpressionAttributeValues={":h": {"S": who}},
                    )
                    wins.append(who)
                except c.exceptions.ConditionalCheckFailedException:
                    pass

            threads = [
                threading.Thread(target=take, args=(who, c))
                for who, c in zip("ab", racers)
            ]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
            if len(wins) != 1:
                wrong.append((k, wins))
    finally:
        db.delete_table(TableName=table)
    if wrong:
        print(
            f"{len(wrong)} of {keys} items had {'two winners' if wrong[0][1] else 'no winner'} "
            f"(first: item k{wrong[0][0]}, winners {wrong[0][1]}): the moto server's conditional "
            "writes are not atomic",
            file=sys.stderr,
        )
        return 1
    print(f"conditional writes atomic: {keys} races, one winner each")
    return 0


if __name__ == "__main__":
    sys.exit(main())
