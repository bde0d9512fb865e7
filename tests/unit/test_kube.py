"""kube.py error translation, without a server."""

import json

import pytest
from kubernetes.client.rest import ApiException

from sunk_sandbox_operator import kube


@pytest.mark.parametrize("status, cls", [(404, kube.NotFound), (409, kube.Conflict), (403, kube.Forbidden),
                                         (422, kube.Invalid)])
def test_every_call_translates_the_same_statuses(status, cls):
    exc = ApiException(status=status, reason="r")
    exc.body = json.dumps({"message": "the server said no"})
    translated = kube._translate(exc)
    assert isinstance(translated, cls) and str(translated) == "the server said no"


def test_other_statuses_stay_api_exceptions():
    exc = ApiException(status=500, reason="boom")
    assert kube._translate(exc) is exc
