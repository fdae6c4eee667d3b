"""A user's own class, for a client_state (ds_trust_worker.py): in a module of its own, so that
the persister process can import it as torch.load will (a class defined in the training script
itself is __main__.Thing, which no other process can import)."""


class Thing:
    def __init__(self, value):
        self.value = value
