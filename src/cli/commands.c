/*
 * commands.c - the command table of cnlab: every command's words, its
 * positional arguments, its flags and its handler (after the Redis
 * command table).  The dispatcher and --help (main.c) and the completion
 * scripts (completion.c) are generated from it; the handlers live in
 * cmd/<group>.c.
 */
#include <stddef.h>

#include "cli/cli.h"
#include "common/util.h"

/* ------------------------------------------------------------------------ */
/* The command table                                                         */
/* ------------------------------------------------------------------------ */

const struct cnl_cli_flag cnl_cli_global_flags[] = {
    {"server", "URL", "control plane URL (env CNLAB_SERVER)", 0},
    {"output", "FORMAT", "table or json (-o)", 'o'},
    {"project", "NAME", "project to act on (default from the config)", 0},
    {"connect-timeout", "DURATION",
     "give up connecting after this (default 10s; env CNLAB_CONNECT_TIMEOUT)",
     0},
    {"read-timeout", "DURATION",
     "give up when the server sends nothing for this (default 60s, 0: "
     "never; env CNLAB_READ_TIMEOUT)",
     0},
    {"help", NULL, "show help (-h)", 0},
    {NULL, NULL, NULL, 0},
};

static const struct cnl_cli_flag login_flags[] = {
    {"user", "NAME", "user name (asked for when missing)", 0},
    {"password-stdin", NULL, "read the password from stdin", 0},
    {"token", "TOKEN", "store an API token (cnl_...) instead", 0},
    {"id-token", "JWT", "exchange an OIDC ID token for a session", 0},
    {"web", NULL, "sign in with the browser (OIDC, PKCE)", 0},
    {"invite", "TOKEN", "redeem an invitation and choose a password", 0},
    {NULL, NULL, NULL, 0},
};

static const struct cnl_cli_flag user_link_flags[] = {
    {"oidc-subject", "SUB", "subject (sub) of the OIDC identity; required", 0},
    {"issuer", "URL", "issuer of the identity (default: the server issuer)", 0},
    {NULL, NULL, NULL, 0},
};

static const struct cnl_cli_flag user_create_flags[] = {
    {"password-stdin", NULL,
     "set the password from stdin (default: an invitation)", 0},
    {NULL, NULL, NULL, 0},
};

static const struct cnl_cli_flag project_create_flags[] = {
    {"on-prem-only", NULL, "never burst this project to a cloud", 0},
    {NULL, NULL, NULL, 0},
};

static const struct cnl_cli_flag yes_flags[] = {
    {"yes", NULL, "do not ask for confirmation", 0},
    {NULL, NULL, NULL, 0},
};

static const struct cnl_cli_flag member_add_flags[] = {
    {"role", "ROLE", "viewer, member (default) or project-admin", 'R'},
    {NULL, NULL, NULL, 0},
};

static const struct cnl_cli_flag token_flags[] = {
    {"expires-in-days", "N",
     "days until it stops working (default 90; 0: "
     "never)",
     0},
    {NULL, NULL, NULL, 0},
};

static const struct cnl_cli_flag join_flags[] = {
    {"node", "NAME", "the name the new node will register with (required)", 0},
    {"expires", "DURATION",
     "how long the token works (default 1h, at most "
     "72h)",
     0},
    {NULL, NULL, NULL, 0},
};

static const struct cnl_cli_flag quota_set_flags[] = {
    {"user", "NAME", "a user's quota instead of --project's", 0},
    {"cluster", "NAME", "the project's --gpu-hours in that cluster only", 0},
    {"gpu-hours", "N", "GPU-hours (1%-blocks / 100 x hours); none: no limit",
     0},
    {"storage-gb-days", "N", "storage GB-days; none: no limit", 0},
    {"concurrent-servers", "N", "notebook servers at once; none: no limit", 0},
    {NULL, NULL, NULL, 0},
};

static const struct cnl_cli_flag config_set_flags[] = {
    {"if-unset", NULL, "only when the setting has no value yet", 0},
    {NULL, NULL, NULL, 0},
};

static const struct cnl_cli_flag profile_create_flags[] = {
    {"gpu", "SHAPE", "the slice: h100-25, a100-3g.20gb, h100-full, h100x8", 0},
    {"description", "TEXT", "one line shown to users", 0},
    {NULL, NULL, NULL, 0},
};

static const struct cnl_cli_flag create_flags[] = {
    {"name", "NAME", "server name (default: made from the image)", 0},
    {"image", "IMAGE", "container image, e.g. pytorch:2.4-cuda12.4", 0},
    {"profile", "PROFILE", "GPU profile (cnlab profiles list)", 'p'},
    {"storage", "SIZE", "workspace size: 50gb, 50Gi or 50 (GB)", 0},
    {"idle", "DURATION", "stop after this much idle time: 2h, 30m", 0},
    {"no-wait", NULL, "return at once instead of waiting until ready", 0},
    {"wait", "DURATION", "how long to wait until ready (default 10m)", 0},
    {"secret", "NAMES",
     "secrets as files under /run/secrets (comma-separated; cnlab secret "
     "list)",
     0},
    {"secret-env", "NAME=VAR",
     "a secret as an environment variable too (comma-separated pairs)", 0},
    {NULL, NULL, NULL, 0},
};

static const struct cnl_cli_flag start_flags[] = {
    {"no-wait", NULL, "return at once instead of waiting until ready", 0},
    {"wait", "DURATION", "how long to wait until ready (default 10m)", 0},
    {NULL, NULL, NULL, 0},
};

static const struct cnl_cli_flag image_import_flags[] = {
    {"name", "NAME:TAG", "the name users give with --image", 0},
    {"insecure", NULL,
     "a registry over plain HTTP or with an unverified certificate", 0},
    {NULL, NULL, NULL, 0},
};

static const struct cnl_cli_flag run_flags[] = {
    {"image", "IMAGE", "container image (cnlab image list; default: host)", 0},
    {"gpu", "SHAPE", "GPU slice: a shape (h100-25) or a profile name", 's'},
    {"profile", "PROFILE", "GPU profile instead of --gpu", 'p'},
    {"priority", "CLASS", "low, normal, high or critical", 'r'},
    {"deadline", "TIME", "finish by (ISO 8601, e.g. 2026-04-30T17:00)", 0},
    {"runtime", "DURATION", "expected run time, for planning: 2h", 0},
    {"gpu-type", "LIST",
     "GPU types it may use: h100,a100 (alone: a GPU of any)", 0},
    {"dataset", "NAME", "dataset it reads: nodes holding it are preferred", 0},
    {"cluster", "NAME", "run in this cluster only (cnlab cluster list)", 0},
    {"nodelist", "NODES", "run only on these nodes: gpu-01,gpu-02", 0},
    {"exclude", "NODES", "never run on these nodes: gpu-03", 0},
    {"prefer", "NODES", "place on these nodes first, where it fits", 0},
    {"avoid", "NODES", "place on these nodes only when no other fits", 0},
    {"nodes", "N", "a gang of N members, one node each, started together", 0},
    {"no-preempt", NULL, "never pre-empt it (jobs are preemptible by default)",
     0},
    {"cpu", "CORES", "CPU: 2, 0.5 or 500m", 0},
    {"memory", "SIZE", "memory: 8Gi, 512Mi, or a number of MiB", 0},
    {"artifacts", "DIR", "where artifacts go (./artifacts/JOB)", 'd'},
    {"detach", NULL, "submit and return without streaming", 0},
    {"secret", "NAMES",
     "secrets as files under /run/secrets (comma-separated; cnlab secret "
     "list)",
     0},
    {"secret-env", "NAME=VAR",
     "a secret as an environment variable too (comma-separated pairs)", 0},
    {NULL, NULL, NULL, 0},
};

static const struct cnl_cli_flag follow_flags[] = {
    {"follow", NULL, "keep streaming until the job ends (-f)", 0},
    {NULL, NULL, NULL, 0},
};

static const struct cnl_cli_flag resize_flags[] = {
    {"blocks", "N",
     "new size in 1% blocks of its GPU (1..100): compute share and VRAM", 0},
    {NULL, NULL, NULL, 0},
};

static const struct cnl_cli_flag mark_flags[] = {
    {"on-prem-only", NULL, "never burst this project to a cloud", 0},
    {"no-on-prem-only", NULL, "allow bursting again", 0},
    {NULL, NULL, NULL, 0},
};

static const struct cnl_cli_flag pin_flags[] = {
    {"clusters", "LIST",
     "comma-separated clusters its work may go to (\"\": any)", 0},
    {NULL, NULL, NULL, 0},
};

static const struct cnl_cli_flag burst_flags[] = {
    {"threshold", "FRACTION", "local use that triggers bursting: 0.90", 0},
    {"provider", "NAME", "aws, gcp, azure, naver or kt (needs a cloud account)",
     0},
    {"strategy", "NAME", "e.g. spot-then-on-demand", 0},
    {"max-cloud-budget", "AMOUNT", "spending cap", 0},
    {"disable", NULL, "turn bursting off", 0},
    {NULL, NULL, NULL, 0},
};

static const struct cnl_cli_flag secret_set_flags[] = {
    {"from-file", "FILE", "read the value from FILE", 0},
    {"from-stdin", NULL, "read the value from stdin", 0},
    {"scope", "SCOPE",
     "user (your own, the default) or project (the --project one)", 0},
    {NULL, NULL, NULL, 0},
};

static const struct cnl_cli_flag secret_scope_flags[] = {
    {"scope", "SCOPE",
     "user (your own, the default) or project (the --project one)", 0},
    {NULL, NULL, NULL, 0},
};

static const struct cnl_cli_flag ssh_key_flags[] = {
    {"name", "NAME", "the key's name (default: from its comment)", 0},
    {NULL, NULL, NULL, 0},
};

static const struct cnl_cli_flag cloud_flags[] = {
    {"account", "ID",
     "account id (AWS: 12 digits; GCP: the project id; Naver: the VPC's "
     "number; KT: the account's name)",
     0},
    {"region", "REGION",
     "e.g. ap-northeast-2 (GCP: the zone, us-central1-a; Naver: KR; KT: the "
     "zone's id)",
     0},
    {"instance-types", "LIST", "comma-separated: g5.xlarge,p5.48xlarge", 0},
    {"access-key-id", "ID",
     "AWS, Naver, KT: the access (API) key CNLab provisions with", 0},
    {"secret-from-file", "FILE",
     "AWS, Naver, KT: the secret key, read from FILE (sealed by cnlabd)", 0},
    {"secret-from-stdin", NULL, "AWS, Naver, KT: the secret key, from stdin",
     0},
    {"tenant-id", "GUID", "Azure: the service principal's directory (tenant)",
     0},
    {"client-id", "GUID",
     "Azure: the service principal's application (client) id; its secret "
     "from --secret-from-file or --secret-from-stdin",
     0},
    {"authority", "URL",
     "Azure: Entra ID's sign-in host (default "
     "https://login.microsoftonline.com;"
     " another for a sovereign cloud)",
     0},
    {"resource-group", "NAME", "Azure: the resource group VMs are made in", 0},
    {"subnet", "ID",
     "Azure: the subnet's resource id VMs are put on; Naver: the subnet's "
     "number; KT: the network's id (optional)",
     0},
    {"key-file", "FILE",
     "GCP: the service account's JSON key, read from FILE (sealed by cnlabd)",
     0},
    {"endpoint", "URL", "the provider's API endpoint (default: the region's)",
     0},
    {"prices", "TYPE=USD,...",
     "on-demand prices an hour, over the published list", 0},
    {"type-specs", "TYPE=GxMODEL:CPUS:GIB:USD,...",
     "instance types of the account's own, such as a KT offering id: "
     "1xT4:8:32:0.95 is one T4, 8 vCPUs, 32 GiB, USD 0.95 an hour",
     0},
    {NULL, NULL, NULL, 0},
};

static const struct cnl_cli_flag peer_grant_flags[] = {
    {"project", "PROJECT", "the project the peer's work runs in (its quotas)",
     0},
    {NULL, NULL, NULL, 0},
};

static const struct cnl_cli_flag peer_add_flags[] = {
    {"url", "URL", "the peer's API (https://; http:// on the loopback only)",
     0},
    {"token-from-file", "FILE", "the token of the peer's cnlab peer grant", 0},
    {"ca", "FILE", "PEM CA the peer's certificate must chain to", 0},
    {NULL, NULL, NULL, 0},
};

static const struct cnl_cli_flag cluster_policy_flags[] = {
    {"policy", "NAME",
     "cnlab (priority, deadline, fair share, age), fifo (strict priority, "
     "submit order, backfill), bestfit, dotprod, gpupacking, gpuclustering, "
     "fgd, random",
     0},
    {"weights", "K=V,...",
     "knobs: w_deadline, w_fairshare, w_age, w_pack, w_locality, w_network, "
     "w_frag, w_order, max_reservations, preempt_class_gap, min_run_s, "
     "grace_s",
     0},
    {"wait-target", "SECONDS",
     "work waiting longer moves to a cluster that can start it (0: never)", 0},
    {NULL, NULL, NULL, 0},
};

static const struct cnl_cli_flag audit_flags[] = {
    {"after", "SEQ", "records after this sequence number", 0},
    {"limit", "N", "at most N records (default 100)", 0},
    {NULL, NULL, NULL, 0},
};

const struct cnl_cli_command cnl_cli_commands[] = {
    {"login", "", "log in and store the token in the config file", login_flags,
     0, 0, false, false, cnl_cli_cmd_login},
    {"logout", "", "end the session on the server and forget the token", NULL,
     0, 0, false, false, cnl_cli_cmd_logout},
    {"whoami", "", "show the user, role and projects", NULL, 0, 0, false, false,
     cnl_cli_cmd_whoami},
    {"profiles list", "", "GPU profiles and when each is available", NULL, 0, 0,
     false, false, cnl_cli_cmd_profiles_list},
    {"server create", "", "provision a notebook server and wait until ready",
     create_flags, 0, 0, false, false, cnl_cli_cmd_server_create},
    {"server list", "", "servers of the project", NULL, 0, 0, false, false,
     cnl_cli_cmd_server_list},
    {"server open", "NAME", "print a server's URL and open it in a browser",
     NULL, 1, 1, false, false, cnl_cli_cmd_server_open},
    {"server exec", "NAME -- COMMAND [ARGS...]",
     "run a command in a running server's container; its exit code is ours",
     NULL, 2, CNL_CLI_POS_MAX, true, false, cnl_cli_cmd_server_exec},
    {"server ssh", "NAME [-- COMMAND [ARGS...]]",
     "a shell (or a command) in your server's container over SSH", NULL, 1,
     CNL_CLI_POS_MAX, true, false, cnl_cli_cmd_server_ssh},
    {"server ssh-config", "NAME",
     "an OpenSSH Host entry for your server (ssh, scp, sftp, IDEs)", NULL, 1, 1,
     false, false, cnl_cli_cmd_server_ssh_config},
    {"server ssh-proxy", "NAME",
     "the ProxyCommand of ssh-config: stdin and stdout to the server's sshd",
     NULL, 1, 1, false, false, cnl_cli_cmd_server_ssh_proxy},
    {"server stop", "NAME", "stop a server (its workspace is kept)", NULL, 1, 1,
     false, false, cnl_cli_cmd_server_stop},
    {"server start", "NAME", "start a stopped server", start_flags, 1, 1, false,
     false, cnl_cli_cmd_server_start},
    {"server delete", "NAME", "delete a stopped server and its storage", NULL,
     1, 1, false, false, cnl_cli_cmd_server_delete},
    {"server show", "NAME", "one server, its state and slice size", NULL, 1, 1,
     false, false, cnl_cli_cmd_server_show},
    {"server resize", "NAME", "change a server's GPU slice (--blocks N)",
     resize_flags, 1, 1, false, false, cnl_cli_cmd_server_resize},
    {"run", "SCRIPT [ARGS...]",
     "run a script on a GPU slice, stream its output, collect artifacts",
     run_flags, 1, CNL_CLI_POS_MAX, true, false, cnl_cli_cmd_run},
    {"jobs list", "", "jobs of the project", NULL, 0, 0, false, false,
     cnl_cli_cmd_jobs_list},
    {"jobs show", "JOB", "one job and its status", NULL, 1, 1, false, false,
     cnl_cli_cmd_jobs_show},
    {"jobs logs", "JOB", "a job's output", follow_flags, 1, 1, false, false,
     cnl_cli_cmd_jobs_logs},
    {"jobs cancel", "JOB", "cancel a job", NULL, 1, 1, false, false,
     cnl_cli_cmd_jobs_cancel},
    {"jobs resize", "JOB", "change a job's GPU slice (--blocks N)",
     resize_flags, 1, 1, false, false, cnl_cli_cmd_jobs_resize},
    {"jobs explain", "JOB", "the scheduler's decisions for a job, in order",
     NULL, 1, 1, false, false, cnl_cli_cmd_jobs_explain},
    {"quota show", "", "GPU-hours, storage and servers used against limits",
     NULL, 0, 0, false, false, cnl_cli_cmd_quota_show},
    {"quota set", "", "set limits of --project or --user (admin)",
     quota_set_flags, 0, 0, false, false, cnl_cli_cmd_quota_set},
    {"project list", "", "projects you belong to", NULL, 0, 0, false, false,
     cnl_cli_cmd_project_list},
    {"project use", "NAME", "set the default project", NULL, 1, 1, false, false,
     cnl_cli_cmd_project_use},
    {"project mark", "NAME", "set project flags (--on-prem-only)", mark_flags,
     1, 1, false, false, cnl_cli_cmd_project_mark},
    {"project pin", "NAME",
     "pin a project's work to clusters (--clusters east,west; \"\": any)",
     pin_flags, 1, 1, false, false, cnl_cli_cmd_project_pin},
    {"project create", "NAME", "create a project (admin)", project_create_flags,
     1, 1, false, false, cnl_cli_cmd_project_create},
    {"project show", "NAME", "a project and its members", NULL, 1, 1, false,
     false, cnl_cli_cmd_project_show},
    {"project delete", "NAME", "delete a project with no active work (admin)",
     yes_flags, 1, 1, false, false, cnl_cli_cmd_project_delete},
    {"project member add", "PROJECT USER", "add a user to a project",
     member_add_flags, 2, 2, false, false, cnl_cli_cmd_member_add},
    {"project member list", "PROJECT", "members of a project and their roles",
     NULL, 1, 1, false, false, cnl_cli_cmd_member_list},
    {"project member set-role", "PROJECT USER ROLE", "change a member's role",
     NULL, 3, 3, false, false, cnl_cli_cmd_member_set_role},
    {"project member remove", "PROJECT USER", "remove a user from a project",
     NULL, 2, 2, false, false, cnl_cli_cmd_member_remove},
    {"cluster list", "", "clusters: nodes, GPUs, load, work and policy", NULL,
     0, 0, false, false, cnl_cli_cmd_cluster_list},
    {"cluster show", "NAME", "one cluster, its policy and its nodes", NULL, 1,
     1, false, false, cnl_cli_cmd_cluster_show},
    {"cluster set-policy", "NAME",
     "a cluster's own scheduling policy and weights (admin)",
     cluster_policy_flags, 1, 1, false, false, cnl_cli_cmd_cluster_set_policy},
    {"policy burst", "", "show or set the cloud burst policy (admin)",
     burst_flags, 0, 0, false, false, cnl_cli_cmd_policy_burst},
    {"cloud add", "PROVIDER", "add a cloud account for bursting (admin)",
     cloud_flags, 1, 1, false, false, cnl_cli_cmd_cloud_add},
    {"cloud list", "", "cloud accounts (admin)", NULL, 0, 0, false, false,
     cnl_cli_cmd_cloud_list},
    {"cloud instances", "",
     "cloud instances the burst launched, their state and cost (admin)", NULL,
     0, 0, false, false, cnl_cli_cmd_cloud_instances},
    {"peer grant", "NAME",
     "let peer site NAME send work to a project here; prints its token "
     "(admin)",
     peer_grant_flags, 1, 1, false, false, cnl_cli_cmd_peer_grant},
    {"peer grants", "", "the peer sites that may send work here (admin)", NULL,
     0, 0, false, false, cnl_cli_cmd_peer_grants},
    {"peer revoke", "NAME",
     "end a peer's grant: its token, and its work here (admin)", NULL, 1, 1,
     false, false, cnl_cli_cmd_peer_revoke},
    {"peer add", "NAME",
     "forward work that waits past its wait target to peer site NAME "
     "(admin)",
     peer_add_flags, 1, 1, false, false, cnl_cli_cmd_peer_add},
    {"peer list", "", "the peer sites work is forwarded to (admin)", NULL, 0, 0,
     false, false, cnl_cli_cmd_peer_list},
    {"peer remove", "NAME", "stop forwarding to a peer site (admin)", NULL, 1,
     1, false, false, cnl_cli_cmd_peer_remove},
    {"secret set", "NAME",
     "keep a secret, encrypted, for your runs and servers (--scope project: "
     "project admins)",
     secret_set_flags, 1, 1, false, false, cnl_cli_cmd_secret_set},
    {"secret list", "",
     "your secrets (or those of the project): names, never values",
     secret_scope_flags, 0, 0, false, false, cnl_cli_cmd_secret_list},
    {"secret delete", "NAME", "delete a secret", secret_scope_flags, 1, 1,
     false, false, cnl_cli_cmd_secret_delete},
    {"ssh-key add", "FILE",
     "add your SSH public key (FILE.pub; - for stdin) for cnlab server ssh",
     ssh_key_flags, 1, 1, false, false, cnl_cli_cmd_ssh_key_add},
    {"ssh-key list", "", "your SSH public keys", NULL, 0, 0, false, false,
     cnl_cli_cmd_ssh_key_list},
    {"ssh-key remove", "NAME|FINGERPRINT",
     "remove an SSH key (its open sessions close)", NULL, 1, 1, false, false,
     cnl_cli_cmd_ssh_key_remove},
    {"user create", "NAME", "create a user with an invitation (admin)",
     user_create_flags, 1, 1, false, false, cnl_cli_cmd_user_create},
    {"user list", "", "users (admin)", NULL, 0, 0, false, false,
     cnl_cli_cmd_user_list},
    {"user show", "NAME", "a user and their projects (admin)", NULL, 1, 1,
     false, false, cnl_cli_cmd_user_show},
    {"user invite", "NAME", "a new invitation: a password reset (admin)", NULL,
     1, 1, false, false, cnl_cli_cmd_user_invite},
    {"user disable", "NAME",
     "refuse every credential of a user from now on (admin)", NULL, 1, 1, false,
     false, cnl_cli_cmd_user_disable},
    {"user enable", "NAME", "let a disabled user in again (admin)", NULL, 1, 1,
     false, false, cnl_cli_cmd_user_enable},
    {"user link", "NAME", "let an OIDC identity sign in as a user (admin)",
     user_link_flags, 1, 1, false, false, cnl_cli_cmd_user_link},
    {"user unlink", "NAME", "take an OIDC identity away from a user (admin)",
     user_link_flags, 1, 1, false, false, cnl_cli_cmd_user_unlink},
    {"token create", "NAME", "an API token for scripts and CI", token_flags, 1,
     1, false, false, cnl_cli_cmd_token_create},
    {"token list", "", "your API tokens", NULL, 0, 0, false, false,
     cnl_cli_cmd_token_list},
    {"token revoke", "NAME|ID", "revoke an API token", NULL, 1, 1, false, false,
     cnl_cli_cmd_token_revoke},
    {"node list", "", "GPU nodes and their use (admin)", NULL, 0, 0, false,
     false, cnl_cli_cmd_node_list},
    {"node show", "NODE", "a node, its labels and its work (admin)", NULL, 1, 1,
     false, false, cnl_cli_cmd_node_show},
    {"node cordon", "NODE", "place no new work on a node (admin)", NULL, 1, 1,
     false, false, cnl_cli_cmd_node_cordon},
    {"node drain", "NODE", "empty a node for maintenance (admin)", NULL, 1, 1,
     false, false, cnl_cli_cmd_node_drain},
    {"node undrain", "NODE", "put a node back in service (admin)", NULL, 1, 1,
     false, false, cnl_cli_cmd_node_undrain},
    {"node join-token", "", "a one-time join token for a node's agent (admin)",
     join_flags, 0, 0, false, false, cnl_cli_cmd_node_join_token},
    {"node revoke", "NODE",
     "cut a node off now: its credentials die, its work moves (admin)", NULL, 1,
     1, false, false, cnl_cli_cmd_node_revoke},
    {"nodes list", "", "GPU nodes and their use (admin)", NULL, 0, 0, false,
     true, cnl_cli_cmd_node_list},
    {"profile create", "NAME", "define a GPU profile (admin)",
     profile_create_flags, 1, 1, false, false, cnl_cli_cmd_profile_create},
    {"profile list", "", "GPU profiles and when each is available", NULL, 0, 0,
     false, false, cnl_cli_cmd_profiles_list},
    {"profile delete", "NAME", "delete a GPU profile (admin)", NULL, 1, 1,
     false, false, cnl_cli_cmd_profile_delete},
    {"image import", "FILE|docker://REF",
     "import an OCI archive, or an image of a registry (admin)",
     image_import_flags, 1, 1, false, false, cnl_cli_cmd_image_import},
    {"image list", "", "the images workloads can run", NULL, 0, 0, false, false,
     cnl_cli_cmd_image_list},
    {"image delete", "NAME", "delete an image (admin)", NULL, 1, 1, false,
     false, cnl_cli_cmd_image_delete},
    {"audit", "", "the audit log (admin)", audit_flags, 0, 0, false, false,
     cnl_cli_cmd_audit},
    {"config show", "", "the settings file: server, project, login", NULL, 0, 0,
     false, false, cnl_cli_cmd_config_show},
    {"config get", "server|project", "print a setting (empty when unset)", NULL,
     1, 1, false, false, cnl_cli_cmd_config_get},
    {"config set", "server|project VALUE", "change a setting", config_set_flags,
     2, 2, false, false, cnl_cli_cmd_config_set},
    {"completion", "bash|zsh|fish", "print a shell completion script", NULL, 1,
     1, false, false, cnl_cli_cmd_completion},
    {"version", "", "print the version", NULL, 0, 0, false, false,
     cnl_cli_cmd_version},
    {"__complete", "WHAT", "completion words (profiles, shapes)", NULL, 1, 1,
     false, true, cnl_cli_cmd_complete},
};

const size_t cnl_cli_ncommands = CNL_ARRAY_SIZE(cnl_cli_commands);
