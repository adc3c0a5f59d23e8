# hpcplace-lib.sh: the functions of an hpcplace job script (sourced by job.sbatch, never run alone).
# Expects from job.sbatch: hp_run_dir hp_plan hp_shm hp_kill_wait hp_attempt hp_warning hp_images.

hp_log() { printf 'hpcplace: %s\n' "$*" >&2; }

declare -A hp_pid_step=()  # running srun pid -> step index
hp_any_running() { [[ -n ${hp_pid_step[*]-} ]]; }
hp_step_desc=() hp_step_comp=() hp_step_ranks=() hp_step_segs=() hp_step_err=()

# hp_start INDEX COMPONENT DESCRIPTION RANKS SEGMENTS ERRFILE COMMAND...: start one step in the
# background. SEGMENTS: `G:RANKS ...`, the ranks of each het group in its task order.
hp_start() {
    hp_step_comp[$1]=$2 hp_step_desc[$1]=$3 hp_step_ranks[$1]=$4 hp_step_segs[$1]=$5 hp_step_err[$1]=$6
    local i=$1 err=$6
    shift 6
    "$@" 2>"$err" &
    hp_pid_step[$!]=$i
}

# hp_rank_at RANKS INDEX: the INDEX-th entry (0-based) of a compressed rank list like 0-3,8,10-11.
hp_rank_at() {
    local IFS=, part lo hi i=$2
    for part in $1; do
        lo=${part%-*} hi=${part#*-}
        if ((i <= hi - lo)); then echo $((lo + i)); return 0; fi
        i=$((i - (hi - lo + 1)))
    done
    echo '?'
}

# hp_rank_of INDEX HOST TASK: the rank of srun's `HOST: task TASK` in step INDEX. In a het step srun
# numbers the tasks of each het group from 0, so the host's group (logs/nodes.txt) picks the ranks. A group
# ordered by its fabric (`G:RANKS:FIRST_NODE:TASKS_PER_NODE`): srun numbers its tasks in Slurm's node order,
# the ranks follow the plan's, so the host's place in the plan (logs/nodes.txt) and the task's place on it.
hp_rank_of() {
    local g j seg rest first tpn IFS=' '
    read -r g j < <(awk -v h="$2" '$3 == h { print $1, $2; exit }' logs/nodes.txt 2>/dev/null)
    for seg in ${hp_step_segs[$1]}; do
        [[ -n $g && ${seg%%:*} == "$g" ]] || continue
        rest=${seg#*:}
        if [[ $rest == *:*:* ]]; then
            tpn=${rest##*:} rest=${rest%:*} first=${rest##*:} rest=${rest%:*}
            hp_rank_at "$rest" $(((j - first) * tpn + $3 % tpn))
        else
            hp_rank_at "$rest" "$3"
        fi
        return 0
    done
    hp_rank_at "${hp_step_ranks[$1]}" "$3"
}

# hp_report_failure INDEX RC: name the component, the rank that failed first with its own exit code,
# and the ranks srun says failed; sets hp_rc to that first task exit code (srun itself returns the
# largest, e.g. 143 of the other ranks being terminated once one failed).
hp_report_failure() {
    local i=$1 rc=$2 line part lo hi t ranks n first= first_task= first_host=
    hp_rc=$rc
    if [[ -r ${hp_step_err[$i]} ]]; then  # srun reports tasks as they end: the first exit code is the cause
        while IFS= read -r line; do
            [[ $line =~ ^srun:\ error:\ ([^:]+):\ tasks?\ ([0-9]+)[0-9,-]*:\ Exited\ with\ exit\ code\ ([0-9]+)$ ]] || continue
            first_host=${BASH_REMATCH[1]} first_task=${BASH_REMATCH[2]} first=${BASH_REMATCH[3]}
            break
        done <"${hp_step_err[$i]}"
    fi
    if [[ -n $first ]]; then
        hp_rc=$first
        part=
        ((first != rc)) && part=" (srun exited $rc: the other ranks were stopped)"
        hp_log "FAILED: component '${hp_step_comp[$i]}' (${hp_step_desc[$i]}; ranks ${hp_step_ranks[$i]}) exited with code $first: rank $(hp_rank_of "$i" "$first_host" "$first_task") on $first_host failed first$part"
    else
        hp_log "FAILED: component '${hp_step_comp[$i]}' (${hp_step_desc[$i]}; ranks ${hp_step_ranks[$i]}) exited with code $rc"
    fi
    [[ -r ${hp_step_err[$i]} ]] || return 0
    while IFS= read -r line; do
        printf '%s\n' "$line" >&2
        [[ $line =~ ^srun:\ error:\ ([^:]+):\ tasks?\ ([0-9,-]+):\ (.*)$ ]] || continue
        # keep the matches: the next test overwrites BASH_REMATCH (and empties it when it fails)
        local host=${BASH_REMATCH[1]} tasks=${BASH_REMATCH[2]} what=${BASH_REMATCH[3]}
        ranks=() n=0
        local IFS=,
        for part in $tasks; do
            lo=${part%-*} hi=${part#*-}
            for ((t = lo; t <= hi; t++)); do
                ((n++ < 16)) && ranks+=("$(hp_rank_of "$i" "$host" "$t")")
            done
        done
        ((n > 16)) && ranks+=("... ($n tasks)")
        if ((n == 1)); then part="rank ${ranks[0]}"; else part="ranks ${ranks[*]}"; fi
        unset IFS
        hp_log "  component '${hp_step_comp[$i]}' $part on $host: $what"
    done <"${hp_step_err[$i]}"
}

# The grace between SIGTERM and SIGKILL: slurm.kill_wait, else the cluster's KillWait (what Slurm
# itself gives tasks at cancel, time limit and preemption).
if [[ -z $hp_kill_wait ]]; then
    hp_kill_wait=$(scontrol show config 2>/dev/null | awk '$1 == "KillWait" { print $3 + 0; exit }')
    [[ $hp_kill_wait =~ ^[0-9]+$ ]] || hp_kill_wait=30
fi

# hp_running_names: the components of the steps still running, comma-separated.
# Services (runtime/services.py): hp_step_service[i] is "required" or "optional" for a service's step.
hp_step_service=() hp_step_group=()

# hp_only_services: steps still run, and every one of them is a service's.
hp_only_services() {
    local pid
    hp_any_running || return 1
    for pid in "${!hp_pid_step[@]}"; do [[ -n ${hp_step_service[${hp_pid_step[$pid]}]-} ]] || return 1; done
    return 0
}

# hp_service_ended: false (the job fails, hp_rc set) when a required service's step has ended; an optional
# one's end is logged. For the Ray mode's wait loop (the steps mode reaps every step in its own).
hp_service_ended() {
    local pid i rc
    for pid in "${!hp_pid_step[@]}"; do
        i=${hp_pid_step[$pid]}
        [[ -n ${hp_step_service[$i]-} ]] && ! kill -0 "$pid" 2>/dev/null || continue
        wait "$pid"
        rc=$?
        unset "hp_pid_step[$pid]"
        if [[ ${hp_step_service[$i]} == optional ]]; then
            hp_log "optional service '${hp_step_comp[$i]}' (${hp_step_desc[$i]}) ended (srun exit $rc); the job runs on"
            continue
        fi
        hp_report_failure "$i" "$((rc ? rc : 1))"
        hp_log "service '${hp_step_comp[$i]}' ended while the job still needed it"
        return 1
    done
    return 0
}

# hp_stop_services: the work is done: SIGTERM to every task of each service's step still running (its
# replicas published their step ids), SIGKILL to the sruns of those still running after the grace time.
hp_stop_services() {
    local pid i f step target stopped= pids=() n names= left
    for pid in "${!hp_pid_step[@]}"; do
        i=${hp_pid_step[$pid]}
        [[ -n ${hp_step_service[$i]-} ]] || continue
        pids+=("$pid") names+="'${hp_step_comp[$i]}', "
        for f in services/"${hp_step_comp[$i]}"/*.json; do
            [[ -r $f ]] || continue
            step=$(sed -n 's/.*"step": *"\([0-9]*\)".*/\1/p' "$f")
            [[ -n $step && " $stopped " != *" $i.$step "* ]] || continue
            stopped+=" $i.$step"
            target=SLURM_JOB_ID_HET_GROUP_${hp_step_group[$i]:-0}
            scancel --signal=TERM "${!target:-$SLURM_JOB_ID}.$step" 2>/dev/null
        done
    done
    [[ -n ${pids[*]-} ]] || return 0
    hp_log "the job's work is done: stopping its service(s) ${names%, } with SIGTERM; SIGKILL after ${hp_kill_wait}s"
    for ((n = 0; n <= hp_kill_wait * 10; n++)); do
        left=0
        for pid in "${pids[@]}"; do
            [[ -n ${hp_pid_step[$pid]-} ]] || continue
            if kill -0 "$pid" 2>/dev/null; then left=1; continue; fi
            wait "$pid"
            hp_log "  service '${hp_step_comp[${hp_pid_step[$pid]}]}' stopped (srun exit $?)"
            unset "hp_pid_step[$pid]"
        done
        ((left)) || return 0
        sleep 0.1
    done
    for pid in "${pids[@]}"; do
        [[ -n ${hp_pid_step[$pid]-} ]] || continue
        hp_log "  service '${hp_step_comp[${hp_pid_step[$pid]}]}' still running after ${hp_kill_wait}s: SIGKILL"
        kill -KILL "$pid" 2>/dev/null
        wait "$pid" 2>/dev/null
        unset "hp_pid_step[$pid]"
    done
}

hp_running_names() {
    local pid out=
    for pid in "${!hp_pid_step[@]}"; do out+="'${hp_step_comp[${hp_pid_step[$pid]}]}', "; done
    printf '%s' "${out%, }"
}

# hp_wait_steps SECONDS: reap steps as they end (logging how each ended); true when none is left.
hp_wait_steps() {
    local pid n i rc
    for ((n = 0; n <= $1 * 10; n++)); do
        for pid in "${!hp_pid_step[@]}"; do
            kill -0 "$pid" 2>/dev/null && continue
            wait "$pid"
            rc=$?
            i=${hp_pid_step[$pid]}
            unset "hp_pid_step[$pid]"
            hp_log "  component '${hp_step_comp[$i]}' (${hp_step_desc[$i]}) stopped (srun exit $rc)"
        done
        hp_any_running || return 0
        ((n < $1 * 10)) && sleep 0.1
    done
    return 1
}

# hp_time_left: seconds until the time limit (squeue %L: [D-][H:]M:S), empty when unknown/unlimited.
hp_time_left() {
    local left d=0 h=0 m=0 sec=0
    left=$(squeue -h -j "$SLURM_JOB_ID" -o %L 2>/dev/null | head -n1)
    [[ $left =~ ^(([0-9]+)-)?(([0-9]+):)?([0-9]+):([0-9]+)$ ]] || return 0
    d=${BASH_REMATCH[2]:-0} h=${BASH_REMATCH[4]:-0} m=${BASH_REMATCH[5]} sec=${BASH_REMATCH[6]}
    echo $(((10#$d * 24 + 10#$h) * 3600 + 10#$m * 60 + 10#$sec))
}

# hp_explain_warning RC: a step killed by SIGTERM after this script passed the time-limit warning on
# as SIGTERM was killed by the warning itself (the program does not trap it): say so, so nobody hunts
# for a crash.
hp_explain_warning() {
    local left
    [[ -n $hp_warn_sent && $hp_warning == TERM@* ]] && (($1 == 143)) || return 0
    left=$(hp_time_left)
    hp_log "  this SIGTERM was Slurm's time-limit warning (slurm.signal_before_limit $hp_warning; ${left:-?}s left): the program does not trap it (docs/slurm-job.md, \"Stopping gracefully\")"
}

# The single place that stops steps (fail fast, cancel, time limit, preemption, requeue): SIGTERM to
# every task of every running step of every het component (`scancel --signal=TERM JOBID` signals
# the steps, not this script), then after hp_kill_wait s SIGKILL: SIGTERM to srun (srun cancels its
# step, killing the tasks), and SIGKILL to an srun that still hangs on. When Slurm itself already
# sent SIGTERM to every task (cancel, time limit), hp_slurm_stopping=1 and only the wait remains.
hp_slurm_stopping=
hp_stop_steps() {
    touch -- "$hp_stop_marker" 2>/dev/null  # from now on every signal stops the guards (see hp_guard_script)
    hp_any_running || return 0
    if [[ -z $hp_slurm_stopping ]]; then
        hp_log "stopping the other components with SIGTERM to every task ($(hp_running_names)); SIGKILL after ${hp_kill_wait}s"
        if ! scancel --signal=TERM "$SLURM_JOB_ID"; then
            hp_log "scancel failed: SIGKILL to the steps now"
            hp_kill_wait=0
        fi
    else
        hp_log "Slurm sent SIGTERM to every task; waiting up to ${hp_kill_wait}s for $(hp_running_names)"
    fi
    hp_wait_steps "$hp_kill_wait" && return 0
    hp_log "still running after ${hp_kill_wait}s: $(hp_running_names); SIGKILL"
    kill -TERM "${!hp_pid_step[@]}" 2>/dev/null
    hp_wait_steps 5 && return 0
    kill -KILL "${!hp_pid_step[@]}" 2>/dev/null
    hp_pid_step=()
}

# The node-local directory: one guard task per node (every het component) creates the job's
# directory and this node's node-<SLURMD_NODENAME> in it (0700), checks both are the job's own (a
# directory another user made first, or a symlink, fails at once naming path and owner; /dev/shm is
# sticky, so a checked directory of ours cannot be swapped later), and when stopped removes its node's
# directory, then the job's whole once no other node's is left (nodes sharing one /dev/shm): also what
# a step left beside it (the Ray mode's ray-n<rank> temp dirs) if that step was stopped first. Stopped
# by hp_cleanup with SIGUSR1 (srun forwards it; SIGTERM would make srun SIGKILL its tasks), or by
# Slurm's SIGTERM at cancel / time limit / job end. The steps mode's time-limit warning (the user's
# signal, which this script sends to every step: hp_deliver_warning) reaches the guard too, while the
# programs run on for its seconds: the guard ignores that signal once this script has recorded the
# warning (the warned marker), while it has not left its stop marker (written before it stops anything)
# and the limit is not reached (squeue's time left: Slurm's SIGTERM at the limit may be the same signal). A guard
# that starts after the job began stopping (its signal sent before this step had a process) stops by the marker.
hp_guard_pid=
hp_stop_marker="$hp_run_dir/.stopping-$SLURM_JOB_ID-$hp_attempt"
hp_warned_marker="$hp_run_dir/.warned-$SLURM_JOB_ID-$hp_attempt"  # the job got Slurm's time-limit warning
hp_guard_script="$(declare -f hp_time_left)"'
umask 077
job=$0 node=$0/node-${SLURMD_NODENAME//[^A-Za-z0-9._-]/_} warning=$1 marker=$3
on_signal() {  # $1: the signal; the time-limit warning is not the end of the job
    local left
    if [[ $1 == "${warning%@*}" && ! -e $marker && -e ${marker%/*}/.warned-${marker##*/.stopping-} ]]; then
        left=$(hp_time_left)
        [[ -n $left ]] && ((left > 0)) && return
    fi
    trap "" USR1 USR2 TERM INT HUP ${warning%@*}  # a 2nd signal must not cut the EXIT trap short
    exit 0
}
stopped=  # a stop that comes while the directories are made waits for their EXIT trap (a job that fails at once)
for sig in USR1 USR2 TERM INT HUP ${warning%@*}; do trap "stopped=$sig" "$sig"; done
for d in "$job" "$node"; do
    mkdir -- "$d" 2>/dev/null
    if [[ -L $d || ! -d $d || ! -O $d || $(stat -c %a -- "$d") != 700 ]]; then
        echo "hpcplace: refusing the node-local directory $d on $SLURMD_NODENAME: $(stat -c "%F owned by %U (uid %u), mode %a" -- "$d" 2>&1) -- not this job'"'"'s own (another user created it first?)" >&2
        exit 1
    fi
done
trap "rm -rf -- \"\$node\"; compgen -G \"\$job/node-*\" >/dev/null || rm -rf -- \"\$job\"" EXIT
for sig in USR1 USR2 TERM INT HUP ${warning%@*}; do trap "on_signal $sig" "$sig"; done
[[ -z $stopped ]] || on_signal "$stopped"
# The job began stopping before this task ran (a component that failed at once): the stop signal reached no
# process of this step yet, and only the stop marker, written before it, tells
[[ -e $marker ]] && on_signal stopping
while :; do sleep 3600 & wait $!; kill $! 2>/dev/null; done
'
hp_guard=(bash -c "$hp_guard_script" "$hp_shm" "$hp_warning" "$hp_kill_wait" "$hp_stop_marker")

# hp_record EVENT [EXIT_CODE]: one line per attempt event in attempts.jsonl (read by `hpcplace
# status`), so the run directory keeps a record of every attempt of a requeued job.
hp_record() {
    printf '{"attempt": %d, "event": "%s", "job_id": "%s", "host": "%s", "time": "%s"%s}\n' "$hp_attempt" "$1" \
        "$SLURM_JOB_ID" "${SLURMD_NODENAME:-}" "$(date -u +%Y-%m-%dT%H:%M:%SZ)" "${2:+, \"exit_code\": $2}" \
        >>"$hp_run_dir/attempts.jsonl" 2>/dev/null
}

hp_cleanup() {
    local rc=$?
    trap - EXIT TERM INT HUP
    hp_stop_steps
    if [[ -n $hp_guard_pid ]]; then
        kill -USR1 "$hp_guard_pid" 2>/dev/null
        local n
        for ((n = 0; n < (hp_kill_wait > 5 ? hp_kill_wait : 5) * 10; n++)); do
            kill -0 "$hp_guard_pid" 2>/dev/null || break
            sleep 0.1
        done
        kill -KILL "$hp_guard_pid" 2>/dev/null
        wait "$hp_guard_pid" 2>/dev/null
    fi
    rm -f -- "$hp_stop_marker" "$hp_warned_marker"
    hp_record end "$rc"
    exit "$rc"
}

# hp_clear_requests HET_COMPONENTS NAME...: unset each NAME, and NAME_HET_GROUP_K and NAME_PACK_GROUP_K
# for every het component K (srun reads those for --het-group=K): requests of the job's allocation that
# srun would otherwise apply to steps, by rules that change between Slurm versions (slurm_job.py,
# STEP_REQUEST_VARIABLES). Every srun of the job names its own CPUs, memory and GRES.
hp_clear_requests() {
    local n=$1 name k
    shift
    for name in "$@"; do
        unset -v "$name"
        for ((k = 0; k < n; k++)); do unset -v "${name}_HET_GROUP_$k" "${name}_PACK_GROUP_$k"; done
    done
}

# hp_begin HET_COMPONENTS: enter the run directory; logs/nodes.txt says which host is node j of het
# component g (read by `hpcplace logs` and the preflight report; 0: not a het job); a requeued attempt
# (1, 2 ...) moves the earlier attempt's logs to logs/attempt-N/ (job.sbatch removes its node-local dirs).
hp_begin() {
    local g var f prev
    cd -- "$hp_run_dir" || { hp_log "cannot enter the run directory $hp_run_dir"; exit 1; }
    mkdir -p logs
    rm -rf -- services  # an earlier attempt's or chain link's service addresses and readiness (runtime/services.py)
    if ((hp_attempt > 0)); then
        prev="logs/attempt-$((hp_attempt - 1))"
        hp_log "attempt $hp_attempt of job $SLURM_JOB_ID (requeued): previous logs moved to $prev; removing its node-local directories"
        mkdir -p "$prev"
        for f in logs/*; do
            [[ -f $f && $f != logs/batch-* ]] && mv -f -- "$f" "$prev/"
        done
    fi
    rm -f logs/fabric.txt  # a chain link's: hp_fabric writes it again
    if (($1 > 0)); then
        for ((g = 0; g < $1; g++)); do
            var=SLURM_JOB_NODELIST_HET_GROUP_$g
            scontrol show hostnames "${!var}" | awk -v g="$g" '{ print g, NR - 1, $0 }'
        done
    else
        scontrol show hostnames "$SLURM_JOB_NODELIST" | awk '{ print 0, NR - 1, $0 }'
    fi >logs/nodes.txt
}

# hp_fabric G KIND UNIT: number het group G's nodes by the site's fabric, as `scontrol show topology` lists
# the topology of G's partition (Slurm 25.05+: the partition's Topology=, else the cluster's; KIND block: its
# blocks, tree: its leaf switches): the nodes of one block after one another, blocks in the order Slurm lists
# their first node, Slurm's order inside one. The plan's consecutive nodes are then block-mates (--segment gives
# each block whole segments); every UNIT nodes of the plan (a segment, block or switch of the plan) that Slurm did
# not give from one block are said (their groups cross the fabric). Rewrites G's lines of logs/nodes.txt, adds
# them with their block to logs/fabric.txt (`G J HOST UNIT`; `-`: the site names none), and exports
# HPCPLACE_NODE_ORDER_G, the node list the tasks of G find themselves in (runtime/slurm_env.py), and
# HPCPLACE_NODE_UNITS_G, each one's block or switch (Ray's nvlink_domain_<block> resources).
hp_fabric() {
    local g=$1 kind=$2 per=$3 var=SLURM_JOB_NODELIST_HET_GROUP_$1 part=SLURM_JOB_PARTITION_HET_GROUP_$1 topo units name list
    [[ -n ${!var-} ]] || var=SLURM_JOB_NODELIST part=SLURM_JOB_PARTITION
    topo=$(scontrol -o show partition "${!part-}" 2>/dev/null | tr ' ' '\n' | awk -F= '$1 == "Topology" { print $2; exit }')
    units=$(scontrol show topology ${topo:+"$topo"} 2>/dev/null | awk -v kind="$kind" '{
        name = ""; nodes = ""; upper = 0
        for (i = 1; i <= NF; i++) {
            eq = index($i, "="); key = substr($i, 1, eq - 1); value = substr($i, eq + 1)
            if (key == (kind == "block" ? "BlockName" : "SwitchName")) name = value
            else if (key == "Nodes") nodes = value
            else if (key == "Level" && value != "0") upper = 1
        }
        if (name != "" && nodes != "" && !upper) print name, nodes
    }')
    [[ -n $units ]] || hp_log "het group $g: the site reports no $kind topology (scontrol show topology${topo:+ $topo}): its nodes keep Slurm's order"
    mapfile -t "hp_order_$g" < <(
        {
            while read -r name list; do
                [[ -n $name ]] && scontrol show hostnames "$list" | awk -v u="$name" '{ print u, $0 }'
            done <<<"$units"
            echo @@  # then the group's hosts, in Slurm's order
            scontrol show hostnames "${!var}"
        } | awk -v g="$g" '$0 == "@@" { hosts = 1; next }
            !hosts { if (!($2 in unit)) unit[$2] = $1; next }
            { u = ($1 in unit) ? unit[$1] : "-"; if (!(u in seen)) { seen[u] = 1; order[++k] = u }; members[u] = members[u] " " $1 }
            END { j = 0; for (i = 1; i <= k; i++) { n = split(members[order[i]], m, " "); for (x = 1; x <= n; x++) print g, j++, m[x], order[i] } }' \
            | tee -a logs/fabric.txt | awk '{ print $3 }')
    local -n hp_order_ref="hp_order_$g"
    local units_in_order line
    units_in_order=$(awk -v g="$g" '$1 == g { printf "%s%s", (n++ ? "," : ""), $4 }' logs/fabric.txt)
    [[ -z $units ]] || awk -v g="$g" -v per="$per" '$1 == g {
            k = int($2 / per); if (!(k in first)) { first[k] = $2; blocks[k] = $4 } else if (index(" " blocks[k] " ", " " $4 " ") == 0) blocks[k] = blocks[k] " " $4
            last[k] = $2 }
        END { for (k in blocks) if (index(blocks[k], " ")) printf "%d-%d %s\n", first[k], last[k], blocks[k] }' logs/fabric.txt |
        sort -n | while read -r line; do
            hp_log "het group $g: plan nodes ${line%% *} lie in $kind units ${line#* } (Slurm gave no whole one): their model-parallel groups cross the fabric"
        done
    { awk -v g="$g" '$1 != g' logs/nodes.txt; for j in "${!hp_order_ref[@]}"; do echo "$g $j ${hp_order_ref[j]}"; done; } \
        | sort -s -k1,1n -k2,2n >logs/nodes.txt.new && mv -f logs/nodes.txt.new logs/nodes.txt
    local IFS=,
    export "HPCPLACE_NODE_ORDER_$g=${hp_order_ref[*]}" "HPCPLACE_NODE_UNITS_$g=$units_in_order"
}

# hp_nodes G FIRST COUNT: nodes FIRST.. of het group G in the plan's order (hp_fabric), comma-separated.
hp_nodes() {
    local -n hp_order_ref="hp_order_$1"
    local IFS=,
    echo "${hp_order_ref[*]:$2:$3}"
}

# hp_preflight_report SRUN_EXIT: after the preflight step (`hpcplace-run --preflight`, one task per
# node), one line per failing node and cause into the batch log and logs/preflight.txt (`hpcplace
# status` shows it): the preflight's own FAILED lines from logs/preflight.<node>.out (which it writes
# itself), or, for a node where it never ran, why (hp_preflight_cause). False if any node failed.
hp_preflight_report() {
    local rc=$1 g j host f line found n=0 failed=0 lines=()
    rm -f logs/preflight.txt
    while read -r g j host; do
        n=$((n + 1))
        f=logs/preflight.$host.out
        if [[ ! -s $f ]]; then
            line=$(hp_preflight_cause "$host")
            [[ -z $line && $rc != 0 ]] && line="$host: FAILED: no preflight output from this node (srun exit $rc; see logs/preflight.srun.err)"
            [[ -n $line ]] && { lines+=("$line"); failed=$((failed + 1)); }
            continue
        fi
        grep -q "^hpcplace-preflight: $host: ok" "$f" && continue
        found=
        while IFS= read -r line; do
            if [[ $line == "hpcplace-preflight: $host: FAILED: "* ]]; then
                lines+=("${line#hpcplace-preflight: }") found=1 failed=$((failed + 1))
            fi
        done <"$f"
        [[ -n $found ]] || { lines+=("$host: FAILED: the preflight did not report (srun exit $rc): $(tail -n 1 -- "$f")"); failed=$((failed + 1)); }
    done <logs/nodes.txt
    if ((failed == 0 && rc != 0)); then
        failed=1 lines+=("preflight step failed (srun exit $rc): $(tail -n 2 logs/preflight.srun.err 2>/dev/null | tr '\n' ' ')")
    fi
    if ((failed == 0)); then
        hp_log "preflight passed on $n node(s) in $(hp_since "$hp_preflight_start") s"
        return 0
    fi
    printf '%s\n' "${lines[@]}" >logs/preflight.txt
    hp_log "preflight FAILED after $(hp_since "$hp_preflight_start") s; no program was started:"
    for line in "${lines[@]}"; do hp_log "  preflight: $line"; done
    return 1
}

# hp_preflight_cause HOST: why the preflight never ran on HOST (it wrote nothing there), from what
# slurmstepd and srun printed to srun's stderr (logs/preflight.srun.err), as one FAILED line, or nothing:
# - `Could not apply device constrain to ...`: Slurm 25.05+ fails a step whose device constraint
#   (ConstrainDevices=yes) cannot be applied, where earlier versions ran it unconstrained;
# - `execve(): PROGRAM: REASON` with srun's `HOST: task N: Exited`: the launcher cannot start there;
# - on a node whose group runs in a container (hp_images, from job.sbatch): Apptainer's own `FATAL:` line
#   (the image's Python missing, a broken image), or srun's `Task launch ... failed on node HOST` (Slurm's
#   --container could not set the bundle up: slurmd's log there says `setup_container`);
# - srun's `task N launch failed: Slurmd could not execve job` (no exit of HOST's task): slurmstepd
#   failed to set the task up before starting it, which is how 25.05+ reports a device constraint that
#   failed for the whole step (its own message goes to slurmd's log only).
# slurmstepd names its node (`slurmstepd-HOST:`) only where slurmd is built for several per host: a line
# naming another node is never taken for HOST's.
hp_preflight_cause() {
    local host=$1 line device= execve= exited= launch= fatal= task_launch= image=
    [[ -r logs/preflight.srun.err ]] || return 0
    image=$(awk -v h="$host" '$3 == h { print $1; exit }' logs/nodes.txt 2>/dev/null)
    image=${image:+${hp_images[$image]-}}
    while IFS= read -r line; do
        [[ $line == slurmstepd-* && $line != "slurmstepd-$host: "* ]] && continue
        case $line in
            *"Could not apply device constrain"*) device=${device:-$line} ;;
            *"execve(): "*) execve=${execve:-$line} ;;
            "srun: error: $host: task"*": Exited with exit code "*) exited=1 ;;
            "srun: error: task "*" launch failed: "*) launch=${launch:-${line#srun: error: }} ;;
            "srun: error: Task launch for "*" failed on node $host: "*) task_launch=${task_launch:-${line#srun: error: }} ;;
            FATAL:*) fatal=${fatal:-$line} ;;
        esac
    done <logs/preflight.srun.err
    if [[ -n $device ]]; then
        echo "$host: FAILED: device constraint failed on node $host: ${device#*error: } (Slurm 25.05 and later fail a step whose ConstrainDevices limits cannot be applied; earlier versions ran it unconstrained): the node's device cgroup cannot be set up (slurmd's log there says why); ask the cluster's admins, or leave the node out"
    elif [[ -n $image && -n $fatal ]]; then
        echo "$host: FAILED: the container did not start on $host ($image): ${fatal//  / }"
    elif [[ -n $image && -n $task_launch ]]; then
        echo "$host: FAILED: the container did not start on $host ($image): srun says \"$task_launch\": Slurm's --container could not set the bundle up there (slurmd's log on $host says why, \"setup_container\"): is the bundle directory with its config.json on storage the node mounts?"
    elif [[ -n $execve && -n $exited && $execve =~ execve\(\):\ (.*):\ ([^:]+)$ ]]; then
        line="$host: FAILED: cannot start the launcher ${BASH_REMATCH[1]} on this node: ${BASH_REMATCH[2]}"
        [[ ${BASH_REMATCH[2]} == "No such file or directory" ]] &&
            line+=" (it, or the interpreter on its #! line, is not on this node: a venv on a node-local or private path such as /tmp? Install hpcplace where every node sees it)"
        echo "$line"
    elif [[ -n $launch && -z $exited ]]; then
        echo "$host: FAILED: device constraint failed on node $host, or another part of Slurm's task set-up there: srun says \"$launch\" before the preflight could start (Slurm 25.05 and later fail a step whose ConstrainDevices limits cannot be applied; slurmd's log on $host then says \"Could not apply device constrain\"); ask the cluster's admins, or leave the node out"
    fi
}

# hp_since EPOCHREALTIME: seconds since then, 0.1 s resolution.
hp_since() {
    local now=${EPOCHREALTIME/[.,]/} then=${1/[.,]/}
    local ds=$(((now - then) / 100000))
    echo "$((ds / 10)).$((ds % 10))"
}

# ---- the time-limit warning (slurm.signal_before_limit) ------------------------------------------
# Slurm sends SIGUSR2 to this script alone (--signal=B:USR2@SECONDS, het component 0), never to the
# steps, and on its own schedule: up to 60 s before the seconds asked for, so possibly before the
# programs run (during the preflight, or while a step is still starting), when a signal to the steps
# would be lost or kill a program before it could install its handler. So this script keeps the
# warning (hp_warning_received) and passes the user's signal on itself (hp_deliver_warning, from the
# wait loops): at the seconds asked for before the limit, and only once its target runs and has had
# hp_warn_settle seconds to install a handler. The target: every step (steps mode: every task of every
# program, `scancel --signal=SIG JOBID`, also steps `hpcplace exec` started; the node-local guards
# ignore it), or the Ray driver's step alone (hp_warn_to=driver: Slurm would signal every raylet).
# Slurm sends the warning once, from its periodic check, and a signal it sends while the batch script is
# still starting is lost (seen on 26.05 with a 1-minute limit): so this script also keeps its own clock
# (hp_warn_end, the job's end as squeue gives it), and passes the warning on by it when none has come.
hp_warn_to=steps hp_warn_settle=2
hp_warn_due= hp_warn_at= hp_warn_up= hp_warn_sent= hp_warn_end=
declare -A hp_step_logs=() hp_step_tasks=()  # steps mode: step index -> its rank log pattern, its task count

# hp_warning_received [LEFT]: the USR2 trap: record the warning (the warned marker: the guards, the chain's
# end) and when to pass it on; a second warning changes nothing. LEFT: called by this script's own clock
# (hp_warning_clock) with the seconds left, Slurm's warning not having come.
hp_warning_received() {
    local left s=${hp_warning#*@}
    [[ -n $hp_warning ]] || { hp_log "SIGUSR2 with no time-limit warning configured: ignored"; return 0; }
    if [[ -n $hp_warn_due || -n $hp_warn_sent ]]; then
        hp_log "time-limit warning from Slurm again: already $([[ -n $hp_warn_sent ]] && echo passed on || echo kept)"
        return 0
    fi
    : >"$hp_warned_marker" 2>/dev/null
    left=${1:-$(hp_time_left)}
    hp_warn_at=$EPOCHSECONDS
    [[ -n $left ]] && ((left > s)) && hp_warn_at=$((EPOCHSECONDS + left - s))
    hp_warn_due=1
    if [[ -n ${1-} ]]; then
        hp_log "time-limit warning: none from Slurm, ${1}s left (Slurm sends it once, and one sent while the job starts is lost): SIG${hp_warning%@*} goes to the $hp_warn_to by this script's clock, once running"
    else
        hp_log "time-limit warning from Slurm (slurm.signal_before_limit $hp_warning; ${left:-?}s left): SIG${hp_warning%@*} goes to the $hp_warn_to in $((hp_warn_at - EPOCHSECONDS))s, ${s}s before the limit, once running"
    fi
}

# hp_steps_up: true when every program step this script started has all its tasks past their shim (each
# rank's shim creates its rank log just before it runs the program; a component's steps share a pattern).
hp_steps_up() {
    local i pat n
    local -A need=()
    for i in "${!hp_step_logs[@]}"; do
        pat=${hp_step_logs[$i]/\{rank\}/*}
        need[$pat]=$((${need[$pat]:-0} + ${hp_step_tasks[$i]}))
    done
    for pat in "${!need[@]}"; do
        n=$(compgen -G "$pat" | wc -l)
        ((n >= ${need[$pat]})) || return 1
    done
}

# hp_warning_clock: the warning by this script's clock when Slurm's has not come by its seconds before the
# job's end: squeue's time left, read once, and again only when the end seems reached (a time limit raised
# meanwhile moves it).
hp_warning_clock() {
    local left s=${hp_warning#*@}
    [[ -n $hp_warning && -z $hp_warn_due && -z $hp_warn_sent && $hp_warn_end != never ]] || return 0
    if [[ -z $hp_warn_end ]] || ((EPOCHSECONDS >= hp_warn_end - s)); then
        left=$(hp_time_left)
        [[ -n $left ]] || { hp_warn_end=never; return 0; }  # no time left known (squeue failed): Slurm's alone
        hp_warn_end=$((EPOCHSECONDS + left))
        ((left <= s)) && hp_warning_received "$left"
    fi
    return 0
}

# hp_deliver_warning: pass a recorded warning on when it is due and its target has run hp_warn_settle s.
hp_deliver_warning() {
    hp_warning_clock
    [[ -n $hp_warn_due ]] || return 0
    local target err rc
    if [[ $hp_warn_to == driver ]]; then
        [[ -r ray/driver.step ]] || return 0
        target=$(<ray/driver.step)
        if [[ ! $target =~ ^[0-9]+$ ]]; then
            hp_warn_due=
            hp_log "time-limit warning: ray/driver.step holds no step id ('$target'): not delivered"
            return 0
        fi
        # the step of the driver's het component, named by that component's own job id: scancel ignores
        # the +OFFSET of JOBID+OFFSET.STEP (22.05 to 26.05) and would signal step STEP of component 0
        err=SLURM_JOB_ID_HET_GROUP_${hp_driver_group:-0}
        target=${!err:-$SLURM_JOB_ID}.$target
    else
        [[ -n $hp_warn_up ]] || hp_steps_up || return 0  # once up, not counted again (a rank log per task)
        target=$SLURM_JOB_ID
    fi
    [[ -n $hp_warn_up ]] || hp_warn_up=$EPOCHSECONDS
    ((EPOCHSECONDS >= hp_warn_at && EPOCHSECONDS >= hp_warn_up + hp_warn_settle)) || return 0
    hp_warn_due= hp_warn_sent=1
    err=$(scancel --signal="${hp_warning%@*}" "$target" 2>&1)
    rc=$?
    if [[ $hp_warn_to == driver ]]; then
        # before 23.11 scancel asks every node of the component for a step and reports "Invalid job id"
        # from those the step does not run on, although it signalled it: the exit code is logged, not trusted
        hp_log "time-limit warning: SIG${hp_warning%@*} sent to the driver (step $target) only (scancel exit $rc${err:+: ${err//$'\n'/ }}); the Ray cluster runs on until the job ends"
    else
        hp_log "time-limit warning: SIG${hp_warning%@*} sent to every task of every step (scancel exit $rc${err:+: ${err//$'\n'/ }})"
    fi
}
