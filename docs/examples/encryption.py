import os

from cryptography.fernet import Fernet

# Set the key ring from your secret store; this example makes a key of its own.
os.environ["PIPELINES_ENCRYPTION__KEYS"] = f'["{Fernet.generate_key().decode()}"]'

import dramatiq

import pipelines
from pipelines import step

app = pipelines.configure()


@dramatiq.actor(secret_fields=["card_number"])
def store_card(user_id: int, card_number: str) -> str:
    return card_number[-4:]


@dramatiq.actor(encrypt=True)
def tokenize(user_id: int, card_number: str) -> str:
    return f"tok-{user_id}-{card_number[-4:]}"  # an encrypting actor's result is sealed too


if __name__ == "__main__":
    from pipelines.testing import running_worker

    with running_worker(app):
        run = app.start(step(tokenize, 7, card_number="4242424242424242"))
        assert run.result(timeout_s=10) == "tok-7-4242"  # opened for a caller that has the keys
        store_card.send(7, card_number="4242424242424242")
        app.broker.join(store_card.queue_name)
