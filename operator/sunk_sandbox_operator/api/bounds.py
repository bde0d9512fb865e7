"""Patterns and bounds of the spec's strings, lists and maps (the models in spec.py use them; the CRD
is rendered from the models, so the API server refuses the same at `kubectl apply`).

Far above what a real binding needs, low enough that one binding's cost stays small: a selector is
evaluated against every namespace at every resync and on every namespace event (10,000 namespaces
at the scale benchmark's size), the globs compile into one regex, and the API server prices each CEL
rule by the largest input the schema allows. A binding stored before these bounds, or under a CRD
not yet upgraded, fails the models' validation (InvalidSpec) and is never compiled.
"""

# Patterns shared by the models and the CRD (the API server enforces them at apply time).
DURATION_PATTERN = r"^([0-9]+(\.[0-9]+)?(ns|us|ms|s|m|h))+$"
SLURM_NAME_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$"
NUMERIC_ID_PATTERN = r"^[0-9]{1,10}$"
DNS_LABEL_PATTERN = r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$"
DNS_SUBDOMAIN_PATTERN = r"^[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?$"
# The same, or empty (a field whose empty value means "discover" or "the default").
OPTIONAL_NAME_PATTERN = r"^([a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?)?$"
OPTIONAL_NAMESPACE_PATTERN = r"^([a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?)?$"
# At most four `*` (maxLength bounds the rest): each is a scan of the name, and the globs run as one
# regex on every namespace, so the stars set what every namespace event costs (docs/scale.md).
NAMESPACE_GLOB_PATTERN = r"^[a-z0-9?\[\]-]*(\*[a-z0-9?\[\]-]*){0,4}$"
ANNOTATION_KEY_PATTERN = r"^([a-z0-9]([-a-z0-9.]*[a-z0-9])?/)?[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$"
DOTTED_PATH_PATTERN = r"^[A-Za-z0-9_-]+(\.[A-Za-z0-9_-]+)*$"
# slurmrestd: the user the token names (a Linux user name), and the names a placeholder job may have:
# literal text and the placeholders {namespace}, {name}, {uid} (the pod's), {sandboxId} (its
# sandbox-id label) and {jobName} (its Job's: SUNK 8.2's gang scheduling places a Job's pods as one).
SLURM_USER_PATTERN = r"^[A-Za-z0-9_][A-Za-z0-9_.-]{0,31}$"
JOB_NAME_TEMPLATE_PATTERN = r"^([^{}\s]|\{(namespace|name|uid|sandboxId|jobName)\})+$"

# Bounds: maxLength on every string, maxItems on every list, maxProperties on every map.
NAME_MAX = 253               # a DNS subdomain (object names, Secret keys, ClusterRole names)
NAMESPACE_MAX = 63           # a DNS label
LABEL_KEY_MAX = 317          # Kubernetes' own: a DNS-subdomain prefix (253), "/", a name (63)
LABEL_VALUE_MAX = 63         # Kubernetes' own
SELECTOR_LABELS_MAX = 32     # matchLabels entries (real selectors have one to three)
SELECTOR_EXPRESSIONS_MAX = 16  # matchExpressions (the 28,000-entry selector is refused at apply)
SELECTOR_VALUES_MAX = 64     # values of one In / NotIn
NAMESPACE_GLOBS_MAX = 64     # sandboxNamespaces.names: a few prefixes, or a list of exact names
ALWAYS_INCLUDE_MAX = 256     # fixed namespaces listed besides the sandboxes
CLIENT_ANNOTATIONS_MAX = 32  # there are seven sunk.coreweave.com keys
URL_MAX = 2048               # what browsers and proxies accept
DOTTED_PATH_MAX = 256        # a path in a YAML document, e.g. scheduler.scope.namespaces
DURATION_MAX = 32            # e.g. 1h30m
JOB_NAME_TEMPLATES_MAX = 8   # spec.slurm.restAPI.jobNameTemplates: each pod is looked up once per template
JOB_NAME_TEMPLATE_MAX = 256
