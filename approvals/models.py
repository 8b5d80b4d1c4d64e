# Approval requests arrive with the approval-gate feature; until then every
# commit to an irreversible shard is refused with APPROVAL_REQUIRED.
