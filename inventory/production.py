"""Production: cfx-llm2, the NixOS host serving Qwen3.6-27B through vLLM on two cards.

Defaults for every remedy key are in remedy/core/config/host_data.py; set only what
differs here. Host data is checked before pyinfra connects.
"""

from remedy.inventory import checked_hosts

production = checked_hosts(
    [
        (
            "cfx-llm2",
            {
                "ssh_user": "root",
                "ssh_strict_host_key_checking": "yes",
                "remedy_environment": "production",
                "flake_dir": "/etc/nixos",
                "flake_input": "tt-stack",
                "server_url": "http://127.0.0.1:8000",
                "min_mem_available_gb": 4,
                # the runtime reduction of tt-stack#49: 8 -> 2 one-GiB pages (one channel per card)
                "hugepages_target": {"1G": 2},
            },
        ),
    ]
)
