#!/usr/bin/env bash
# The Slurm tier of the tests (tests/slurm/): Slurm's controller and node daemons, its client commands and munge,
# from the distribution's packages (Debian 12: Slurm 22.05 and munge 0.5.15). The tests start their own slurmctld,
# slurmd and munged on private ports, sockets and directories; nothing here starts or configures a service (while
# the packages install, a policy-rc.d keeps their maintainer scripts from starting the system's own daemons).
# Fails loudly when they cannot be installed: the Slurm tests do not skip.
set -euo pipefail
. "$(dirname "${BASH_SOURCE[0]}")/common.sh"

say "Slurm for the tests (slurmctld, slurmd, slurm-client, munge)"
packages=(slurmctld slurmd slurm-client munge)
missing=()
for pkg in "${packages[@]}"; do
    dpkg_installed "$pkg" || missing+=("$pkg")
done
policy=/usr/sbin/policy-rc.d
if [ "${#missing[@]}" -gt 0 ] && [ ! -e "$policy" ]; then
    as_root sh -c "printf '#!/bin/sh\nexit 101\n' > $policy && chmod 755 $policy"
    trap 'as_root rm -f "$policy"' EXIT
fi
apt_ensure "${packages[@]}"
for cmd in slurmctld slurmd sbatch squeue scontrol scancel sinfo munged; do
    command -v "$cmd" >/dev/null 2>&1 || die "$cmd is missing after installing Slurm's packages"
done
info "$(slurmctld -V) with munge $(munged -V 2>&1 | awk '{print $1; exit}')"
