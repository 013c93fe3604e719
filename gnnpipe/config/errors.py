"""The one error of params loading, raised by the loader and the cross-field rules alike."""


class ParamsError(ValueError):
    """A params.yaml key is unknown, missing or has a bad value (one line naming the key)."""
