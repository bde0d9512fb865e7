"""`helm test`: every operator pod answers /readyz, and the API server serves the CRD.

Run by the test hook's Pod in the operator's own image (its Python and standard library only: no
other image to mirror or pin), as the hook's ServiceAccount, which may only list pods in the
operator's namespace. Arguments: namespace, pod label selector, health port, group/version, plural.
"""

import json
import os
import ssl
import sys
import urllib.error
import urllib.parse
import urllib.request

SA = "/var/run/secrets/kubernetes.io/serviceaccount"
NAMESPACE, SELECTOR, PORT, GROUP_VERSION, PLURAL = sys.argv[1:6]
DIRECT = urllib.request.ProxyHandler({})  # pod IPs and the API server: never through a proxy


def url_host(host):
    return f"[{host}]" if ":" in host else host


def api(path):
    host, port = os.environ["KUBERNETES_SERVICE_HOST"], os.environ["KUBERNETES_SERVICE_PORT"]
    with open(f"{SA}/token") as f:
        token = f.read().strip()
    request = urllib.request.Request(f"https://{url_host(host)}:{port}{path}",
                                     headers={"Authorization": f"Bearer {token}", "Accept": "application/json"})
    opener = urllib.request.build_opener(DIRECT, urllib.request.HTTPSHandler(
        context=ssl.create_default_context(cafile=f"{SA}/ca.crt")))
    with opener.open(request, timeout=10) as response:
        return json.load(response)


def check_crd():
    served = [r["name"] for r in api(f"/apis/{GROUP_VERSION}")["resources"]]
    if PLURAL not in served:
        return [f"FAIL the API server serves {GROUP_VERSION} without {PLURAL}: {served}"]
    return [f"ok   the API server serves {PLURAL} in {GROUP_VERSION}"]


def check_pods():
    query = urllib.parse.urlencode({"labelSelector": SELECTOR})
    pods = [p for p in api(f"/api/v1/namespaces/{NAMESPACE}/pods?{query}")["items"]
            if not p["metadata"].get("deletionTimestamp")]
    if not pods:
        return [f"FAIL no operator pod in {NAMESPACE} ({SELECTOR}): is the Deployment scaled to 0, or not scheduled?"]
    lines = []
    for pod in pods:
        name, ip = pod["metadata"]["name"], pod.get("status", {}).get("podIP")
        if not ip:
            lines.append(f"FAIL pod {name} has no IP yet (phase {pod.get('status', {}).get('phase')})")
            continue
        try:
            with urllib.request.build_opener(DIRECT).open(f"http://{url_host(ip)}:{PORT}/readyz", timeout=10) as response:
                status = response.status
        except urllib.error.HTTPError as error:
            status = error.code
        except OSError as error:
            lines.append(f"FAIL pod {name} ({ip}:{PORT}) does not answer /readyz: {error}")
            continue
        verdict = "ok  " if status == 200 else "FAIL"
        lines.append(f"{verdict} pod {name} answers /readyz with {status}"
                     + ("" if status == 200 else " (not ready: its caches are not listed yet, see its log)"))
    return lines


def main():
    lines = []
    for check in (check_crd, check_pods):
        try:
            lines += check()
        except (OSError, KeyError, ValueError) as error:
            lines.append(f"FAIL {check.__name__}: {error}")
    print("\n".join(lines))
    return 1 if any(line.startswith("FAIL") for line in lines) else 0


sys.exit(main())
