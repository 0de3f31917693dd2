"""dscache errors: the Error family classes and the mapping from DSC_E* names to them."""

from typing import Dict, Optional, Tuple, Type


class Error(Exception):
    """A libdscache error: .code (negative DSC_E* value), .name ("DSC_EUNAVAIL"), message."""

    def __init__(self, code: int, message: str, name: Optional[str] = None) -> None:
        super().__init__(message)
        self.code = code
        self.name = name or "DSC_UNKNOWN"

    def __str__(self) -> str:
        # The code once: a message from the library may name it already.
        if self.name in self.args[0]:
            return self.args[0]
        return "%s (%s)" % (self.args[0], self.name)


class Unavailable(Error):
    """No server (or no replica of a shard) answered: network, time-out, servers down."""


class NotFound(Error):
    """The dataset (or a shard, or a fallback file) does not exist."""


class Corrupt(Error):
    """Stored or received data failed a check (checksum, header, manifest, decompression)."""


class BadState(Error):
    """A saved loader state that is damaged or was saved with other order settings."""


class DecodeError(Error):
    """An image of a decoded field (Loader(decode=...)) did not decode: the message names the
    dataset, shard and sample."""


class DatasetChangedError(Error):
    """The dataset was replaced on the server (a new version: a new manifest) while this loader
    read the old one: it stops rather than mix the two versions. The message names the dataset
    and the server ("dataset 'NAME' changed on server HOST:PORT since this loader opened it ...").
    Open a new Loader to read the new version."""


class InvalidOption(Error, ValueError):
    """A loader option or argument the library rejects (also a ValueError)."""


# DSC_E* names (without "DSC_") by family; codes not listed raise plain Error.
_FAMILIES: Dict[Type[Error], Tuple[str, ...]] = {
    Unavailable: ("EUNAVAIL", "EALLDOWN", "ECONNREFUSED", "ECONNRESET", "ETIMEDOUT", "ECLOSED",
                  "EPIPE"),
    NotFound: ("ENOTFOUND", "ENOENT"),
    Corrupt: ("ECORRUPT", "ECHUNKSUM", "EDATASUM", "EFILESUM", "EDECOMPRESS", "EBADMAGIC",
              "EBADHEADER", "EBADSCHEMA", "EBADINDEX", "EBADFOOTER", "EBADMANIFEST",
              "ETRUNCATED"),
    BadState: ("EBADSTATE",),
    DecodeError: ("EDECODE",),
    DatasetChangedError: ("ECHANGED",),
    InvalidOption: ("EINVAL", "ERANGE"),
}
_FAMILY_BY_NAME = {"DSC_" + n: cls for cls, names in _FAMILIES.items() for n in names}


def _error(code: int, message: str, name: str) -> Error:
    return _FAMILY_BY_NAME.get(name, Error)(code, message, name)
