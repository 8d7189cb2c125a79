#!/usr/bin/env python3
"""Capture a real kube-apiserver's answers to the requests of the fidelity sweep, as
test fixtures in testdata/fidelity/ (NAME.req: the request line and headers sent; NAME.meta:
the status line and Content-Type; NAME.body: the body bytes, chunked framing removed).

    python3 tools/capture_fidelity.py https://127.0.0.1:6443 ~/real-apiserver/admin.token [NAME...]

The objects it reads are made by tools/fidelity_objects.sh (namespaces kache-fid-a and
kache-fid-b, CRDs widgets.fid.example.com and gadgets.fid.k8s.io). Unit tests compare
kache's answers with these bytes; a capture is never edited by hand.
"""
import http.client
import os
import ssl
import sys

CM = "/api/v1/namespaces/kache-fid-a/configmaps"
WIDGETS = "/apis/fid.example.com/v1/namespaces/kache-fid-a/widgets"
GADGETS = "/apis/fid.k8s.io/v1/gadgets"
CURL = {"User-Agent": "curl/8.5.0"}

# name -> (path, extra headers)
CASES = {
    # 1: custom resources keep apiVersion/kind on LIST items; their lists are key-sorted.
    "cr-list-widgets": (WIDGETS, {}),
    "cr-list-widgets-limit2": (WIDGETS + "?limit=2", {}),
    "cr-list-widgets-all": ("/apis/fid.example.com/v1/widgets", {}),
    "cr-get-widget": (WIDGETS + "/w1", {}),
    "cr-list-gadgets": (GADGETS, {}),
    "cr-list-gadgets-limit1": (GADGETS + "?limit=1", {}),
    "cr-list-widgets-empty": (WIDGETS + "?labelSelector=app%3Dnone", {}),
    "cr-watch-widget-rv0": (WIDGETS + "?watch=1&resourceVersion=0&timeoutSeconds=1&fieldSelector=metadata.name%3Dw1", {}),
    # 2: a *.k8s.io CRD asked for protobuf answers JSON; asked for protobuf only, 406.
    "cr-gadgets-pb-json": (GADGETS, {"Accept": "application/vnd.kubernetes.protobuf, application/json"}),
    "cr-gadgets-pb-only": (GADGETS, {"Accept": "application/vnd.kubernetes.protobuf"}),
    "cr-get-missing-pb-first": (WIDGETS + "/does-not-exist", {"Accept": "application/vnd.kubernetes.protobuf, application/json"}),
    # 3: limit=-1 is no limit.
    "cm-list": (CM, {}),
    "cm-list-limit-minus1": (CM + "?limit=-1", {}),
    # 4: query parameters.
    "q-watch-yes": (CM + "?watch=yes&timeoutSeconds=1&fieldSelector=metadata.name%3Dcm1", {}),
    "q-watch-empty": (CM + "?watch=&timeoutSeconds=1&fieldSelector=metadata.name%3Dcm1", {}),
    "q-watch-false-no": (CM + "?watch=no&timeoutSeconds=1&fieldSelector=metadata.name%3Dcm1", {}),
    "q-bookmarks-maybe": (CM + "?watch=1&allowWatchBookmarks=maybe&timeoutSeconds=1&fieldSelector=metadata.name%3Dcm1", {}),
    "q-rvmatch-exact-no-rv": (CM + "?resourceVersionMatch=Exact", {}),
    "q-rvmatch-bogus": (CM + "?resourceVersionMatch=Bogus&resourceVersion=1", {}),
    "q-rvmatch-bogus-no-rv": (CM + "?resourceVersionMatch=Bogus", {}),
    "q-rvmatch-exact-rv0": (CM + "?resourceVersionMatch=Exact&resourceVersion=0", {}),
    "q-rvmatch-continue": (CM + "?resourceVersionMatch=NotOlderThan&continue=x", {}),
    "q-sendinitial-list": (CM + "?sendInitialEvents=true", {}),
    "q-watch-rvmatch": (CM + "?watch=1&resourceVersionMatch=NotOlderThan&timeoutSeconds=1", {}),
    "q-watch-sendinitial-no-match": (CM + "?watch=1&sendInitialEvents=true&timeoutSeconds=1", {}),
    "q-watch-rvmatch-exact-sie": (CM + "?watch=1&sendInitialEvents=true&resourceVersionMatch=Exact", {}),
    "q-limit-abc": (CM + "?limit=abc", {}),
    "q-limit-1.5": (CM + "?limit=1.5", {}),
    "q-limit-huge": (CM + "?limit=99999999999999999999", {}),
    "q-rv-abc": (CM + "?resourceVersion=abc", {}),
    "q-rv-minus1": (CM + "?resourceVersion=-1", {}),
    "q-timeout-abc": (CM + "?timeoutSeconds=abc&watch=1", {}),
    "q-continue-garbage": (CM + "?continue=garbage", {}),
    "q-continue-with-rv": (CM + "?continue=eyJ2IjoibWV0YS5rOHMuaW8vdjEiLCJydiI6MSwic3RhcnQiOiIvY20xXHUwMDAwIn0&resourceVersion=5", {}),
    "q-continue-bad-b64": (CM + "?continue=a%21b", {}),
    "q-continue-bad-json": (CM + "?continue=e30", {}),
    # 6: pretty JSON.
    "pretty-list": (CM + "?pretty=true", {}),
    "pretty-list-1": (CM + "?pretty=1&limit=2", {}),
    "pretty-curl-list": (CM, CURL),
    "pretty-curl-get": (CM + "/cm1", CURL),
    "pretty-curl-false": (CM + "?pretty=false", CURL),
    "pretty-curl-status": (CM + "?limit=abc", CURL),
    "pretty-curl-404": (CM + "/missing", CURL),
    "pretty-wget-list": (CM, {"User-Agent": "Wget/1.21"}),
    "pretty-mozilla-list": (CM, {"User-Agent": "Mozilla/5.0 (X11)"}),
    "pretty-curl-watch": (CM + "?watch=1&resourceVersion=0&timeoutSeconds=1&fieldSelector=metadata.name%3Dcm1", CURL),
    "pretty-cr-list": (WIDGETS + "?pretty=true", {}),
    "pretty-pb": (CM + "?pretty=true", {"Accept": "application/vnd.kubernetes.protobuf"}),
    "pretty-table": (CM + "?pretty=true", {"Accept": "application/json;as=Table;v=v1;g=meta.k8s.io"}),
    "pretty-metadata": (CM + "?pretty=true", {"Accept": "application/json;as=PartialObjectMetadataList;v=v1;g=meta.k8s.io"}),
}


def main():
    server, token_file = sys.argv[1], sys.argv[2]
    names = sys.argv[3:] or list(CASES)
    token = open(os.path.expanduser(token_file)).read().strip()
    host = server.split("://", 1)[1]
    out = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "testdata", "fidelity")
    os.makedirs(out, exist_ok=True)
    ctx = ssl._create_unverified_context()
    for name in names:
        path, extra = CASES[name]
        headers = {"User-Agent": "kache-fidelity/1.0", "Accept": "application/json"}
        headers.update(extra)
        conn = http.client.HTTPSConnection(host, context=ctx, timeout=20)
        conn.request("GET", path, headers={**headers, "Authorization": "Bearer " + token})
        r = conn.getresponse()
        body = r.read()
        conn.close()
        with open(os.path.join(out, name + ".req"), "w") as f:
            f.write(f"GET {path}\n")
            for k, v in headers.items():
                f.write(f"{k}: {v}\n")
        with open(os.path.join(out, name + ".meta"), "w") as f:
            f.write(f"{r.status}\nContent-Type: {r.getheader('Content-Type')}\n")
        with open(os.path.join(out, name + ".body"), "wb") as f:
            f.write(body)
        print(name, r.status, len(body), flush=True)


if __name__ == "__main__":
    main()
