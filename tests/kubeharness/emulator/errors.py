"""Errors in the API server's own shape (a `Status` with the reasons Kubernetes uses), and the
query parameters a real API server refuses, refused the same way.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

import kmock


def api_error(status: int, reason: str, message: str) -> kmock.KubernetesError:
    # Non-empty details, or kmock puts its own traceback there.
    details = {"causes": [{"message": message}]}
    return kmock.KubernetesError(status=status, reason=reason, message=message, details=details)


class PageNotFound(kmock.KubernetesError):
    """What a real API server answers for a path it serves nothing at (a resource whose CRD is
    not installed, or not yet): a plain-text `404 page not found`, not a JSON Status."""

    def __init__(self) -> None:
        super().__init__(status=404, reason="NotFound", message="404 page not found")


def bad_request(message: str) -> kmock.KubernetesError:
    return api_error(400, "BadRequest", message)


def not_found(resource: kmock.resource, name: str | None) -> kmock.KubernetesError:
    what = f"{resource.plural}.{resource.group}" if resource.group else f"{resource.plural}"
    return api_error(404, "NotFound", f'{what} "{name}" not found')


def invalid(message: str) -> kmock.KubernetesError:
    return api_error(422, "Invalid", message)


def conflict(message: str) -> kmock.KubernetesError:
    return api_error(409, "Conflict", message)


_GO_INT = re.compile(r"[+-]?[0-9]+")
_GO_UINT = re.compile(r"[0-9]+")


def check_query(params: Mapping[str, str]) -> None:
    """Refuse the query parameters a real kube-apiserver refuses, with its status and message.

    Checked against kube-apiserver 1.24: `timeoutSeconds` and `limit` are parsed as integers
    (`timeoutSeconds=270.0` is a 400, which once stopped every watch of the operator at start);
    a `resourceVersion` that is not an unsigned integer is a 500, or a 400 with
    `resourceVersionMatch`. Booleans such as `watch=yes` are taken leniently there too.
    """
    for name in ("timeoutSeconds", "limit"):
        value = params.get(name)
        if value is not None and value != "" and not _GO_INT.fullmatch(value):
            raise bad_request(f'strconv.ParseInt: parsing "{value}": invalid syntax')
    version = params.get("resourceVersion")
    if version and not _GO_UINT.fullmatch(version):
        detail = (
            f'resourceVersion: Invalid value: "{version}": strconv.ParseUint: parsing '
            f'"{version}": invalid syntax'
        )
        if params.get("resourceVersionMatch"):
            raise bad_request(f"invalid resource version: {detail}")
        raise api_error(500, "", detail)
