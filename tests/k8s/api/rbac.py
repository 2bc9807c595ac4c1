"""rbac.py - the API server's RBAC authorizer, for the loopback API servers
of the tests (kube_apiserver.py, fake_apiserver.py): one ServiceAccount's
requests are allowed only what the manifests of deploy/k8s grant it.

Rbac(files, namespace, subject) reads ClusterRoles, Roles,
ClusterRoleBindings and RoleBindings from the YAML files (any number of
documents each; namespaced objects without a namespace are `namespace`'s,
as the kustomization sets it), for the ServiceAccount `subject`
("NAMESPACE/NAME").  refuse(method, path, query) is None when the request
is allowed, else (403, message) in the API server's words.  A request is
read as the API server's request info reads it: /api/v1/... (group "") or
/apis/GROUP/VERSION/..., an optional namespaces/NS/, the resource, a name
and a subresource; the verb from the method (GET: get with a name, list
without, watch with watch=1; POST create, PUT update, PATCH patch, DELETE
delete, or deletecollection without a name).  It is allowed when a rule
of a ClusterRole bound by a ClusterRoleBinding, or of a Role or
ClusterRole bound by a RoleBinding of the request's namespace, names the
group (or "*"), the resource or resource/subresource (or "*"), the verb
(or "*"), and the name when the rule has resourceNames.  Anything else
(a path that is no resource) is refused.
"""


class Rbac:
    def __init__(self, files, namespace, subject):
        self.objs = {"ClusterRole": {}, "Role": {}, "ClusterRoleBinding": [],
                     "RoleBinding": []}
        self.on = bool(files)
        self.sa_ns, self.sa_name = subject.split("/")
        self.user = "system:serviceaccount:%s:%s" % (self.sa_ns, self.sa_name)
        if not files:
            return
        import yaml
        for f in files:
            for d in yaml.safe_load_all(open(f)):
                if not d or d.get("kind") not in self.objs:
                    continue
                md = d["metadata"]
                md.setdefault("namespace", namespace)
                if d["kind"] == "ClusterRole":
                    self.objs["ClusterRole"][md["name"]] = d
                elif d["kind"] == "Role":
                    self.objs["Role"][(md["namespace"], md["name"])] = d
                else:
                    self.objs[d["kind"]].append(d)

    @staticmethod
    def attrs(method, path, q):
        """(verb, group, resource, subresource, namespace, name), or None
        for a path that is no resource."""
        p = path.strip("/").split("/")
        if p[:2] == ["api", "v1"]:
            group, rest = "", p[2:]
        elif p[:1] == ["apis"] and len(p) >= 3:
            group, rest = p[1], p[3:]
        else:
            return None
        ns = None
        if rest[:1] == ["namespaces"] and len(rest) >= 2 and \
                (len(rest) == 2 or rest[2] in ("status", "finalize")):
            # A namespace itself (and its status, finalize): resource
            # namespaces, named and in that namespace, as the API
            # server's request info reads it.
            ns, rest = rest[1], ["namespaces"] + rest[1:]
        elif len(rest) >= 3 and rest[0] == "namespaces":
            ns, rest = rest[1], rest[2:]
        if not rest:
            return None
        res, name = rest[0], rest[1] if len(rest) > 1 else ""
        sub = rest[2] if len(rest) > 2 else ""
        if method in ("GET", "HEAD"):
            verb = "get" if name else \
                ("watch" if q.get("watch", [""])[0] in ("1", "true")
                 else "list")
        else:
            verb = {"POST": "create", "PUT": "update", "PATCH": "patch",
                    "DELETE": "delete" if name else "deletecollection"
                    }.get(method, method.lower())
        return verb, group, res, sub, ns, name

    def _subject(self, binding):
        return any(x.get("kind") == "ServiceAccount" and
                   x.get("name") == self.sa_name and
                   x.get("namespace") == self.sa_ns
                   for x in binding.get("subjects") or [])

    def _roles(self, ns):
        for b in self.objs["ClusterRoleBinding"]:
            if self._subject(b) and b["roleRef"]["kind"] == "ClusterRole":
                yield self.objs["ClusterRole"].get(b["roleRef"]["name"])
        for b in list(self.objs["RoleBinding"]):
            if ns is None or b["metadata"]["namespace"] != ns or \
                    not self._subject(b):
                continue
            ref = b["roleRef"]
            yield (self.objs["ClusterRole"].get(ref["name"])
                   if ref["kind"] == "ClusterRole"
                   else self.objs["Role"].get((ns, ref["name"])))

    @staticmethod
    def _allows(rule, verb, group, res, sub, name):
        want = res + ("/" + sub if sub else "")
        return (("*" in rule.get("apiGroups", []) or
                 group in rule.get("apiGroups", [])) and
                ("*" in rule.get("resources", []) or
                 want in rule.get("resources", [])) and
                ("*" in rule.get("verbs", []) or
                 verb in rule.get("verbs", [])) and
                (not rule.get("resourceNames") or
                 name in rule["resourceNames"]))

    def refuse(self, method, path, q):
        a = self.attrs(method, path, q)
        if a is None:
            return 403, "forbidden: User \"%s\" cannot %s path \"%s\"" % (
                self.user, method.lower(), path)
        verb, group, res, sub, ns, name = a
        if any(self._allows(r, verb, group, res, sub, name)
               for role in self._roles(ns) if role
               for r in role.get("rules") or []):
            return None
        what = res + ("/" + sub if sub else "")
        where = " in the namespace \"%s\"" % ns if ns else \
            " at the cluster scope"
        return 403, ("%s%s is forbidden: User \"%s\" cannot %s resource "
                     "\"%s\" in API group \"%s\"%s"
                     % (what + (".%s" % group if group else ""),
                        " \"%s\"" % name if name else "", self.user, verb,
                        what, group, where))
