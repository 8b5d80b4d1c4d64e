/**
 * One error class per error-code family of the server's contract, all under
 * ZeroLockError, mapped from the JSON error envelope's `code` (then its HTTP
 * status). The same families and names as the Python SDK's zerolock_sdk/errors.py,
 * in camelCase.
 */

/** Whatever the envelope carried besides `code` and `message`. */
export type ErrorDetails = Record<string, unknown>;

export class ZeroLockError extends Error {
  readonly code: string;
  readonly status: number;
  readonly details: ErrorDetails;

  constructor(code: string, message: string, status: number, details: ErrorDetails = {}) {
    super(`${code}: ${message}`);
    this.name = new.target.name;
    this.code = code;
    this.status = status;
    this.details = details;
  }
}

/** 409 STALE_VERSION: someone committed first. Carries what won. */
export class StaleCommitError extends ZeroLockError {
  get currentVersion(): number | undefined {
    return this.details["current_version"] as number | undefined;
  }
  /** Absent for a key without shard:read (the server leaves it out). */
  get currentValue(): unknown {
    return this.details["current_value"];
  }
  get expectedVersion(): number | undefined {
    return this.details["expected_version"] as number | undefined;
  }
}

/** 409 READ_SET_STALE: a shard this decision was based on moved on. */
export class ReadSetStaleError extends ZeroLockError {
  get stale(): { shard_id: string; read_version: number; current_version: number | null }[] {
    return (this.details["stale"] as never) ?? [];
  }
}

/** 403 APPROVAL_REQUIRED: the shard is irreversible; request an approval. */
export class IrreversibleShardError extends ZeroLockError {}

/** 403 APPROVAL_INVALID; `reason` says why (WRONG_SHARD, EXPIRED, ...). */
export class ApprovalInvalidError extends ZeroLockError {
  get reason(): string | undefined {
    return this.details["reason"] as string | undefined;
  }
}

/** 400 SCHEMA_VIOLATION: the value does not match the shard's schema. */
export class SchemaViolationError extends ZeroLockError {}

/** 400 VALIDATION_ERROR, UNSUPPORTED_DIFF, MALFORMED_JSON and other bad input (and 422). */
export class ValidationError extends ZeroLockError {}

/** 403: the key may not do this (PERMISSION_DENIED, AGENT_NOT_ALLOWED, NOT_AN_OWNER, ...). */
export class PermissionDeniedError extends ZeroLockError {}

/** 403 SELF_APPROVAL: the requester deciding its own approval. */
export class SelfApprovalError extends PermissionDeniedError {}

/** 401: no key, an unknown, revoked or expired key. */
export class AuthenticationError extends ZeroLockError {}

/**
 * No key was passed and ZEROLOCK_API_KEY is not set: thrown before anything is
 * sent (status 0: the server never saw it), since a keyless request can only be
 * refused, and each refusal is an auth failure in the server's audit log.
 */
export class MissingApiKeyError extends AuthenticationError {
  static readonly MESSAGE =
    "No ZeroLock API key. Pass { apiKey } to the client or set ZEROLOCK_API_KEY " +
    "(make one with `python manage.py createapikey NAME --permissions " +
    "shard:read,shard:write,shard:create`).";

  constructor() {
    super("NO_API_KEY", MissingApiKeyError.MESSAGE, 0);
  }
}

/** 404: no such shard, approval, lease, reservation, path; or NOTHING_TO_CLAIM. */
export class NotFoundError extends ZeroLockError {}

/** Other 409s: SHARD_EXISTS, APPROVAL_NOT_PENDING, APPROVAL_EXPIRED, ALREADY_DECIDED, ... */
export class ConflictError extends ZeroLockError {}

/** 409 FENCED: a newer lease holder has written this shard. */
export class FencedError extends ConflictError {
  get currentFence(): number | undefined {
    return this.details["current_fence"] as number | undefined;
  }
}

/** 409 RESERVATION_CONFLICT: a pattern overlaps another agent's reservation. */
export class ReservationConflictError extends ConflictError {
  get conflicts(): Record<string, unknown>[] {
    return (this.details["conflicts"] as Record<string, unknown>[] | undefined) ?? [];
  }
}

/** 429: slow down; `retryAfter` seconds (the client retries these itself, bounded). */
export class RateLimitedError extends ZeroLockError {
  readonly retryAfter: number;

  constructor(code: string, message: string, status: number, details: ErrorDetails, retryAfter = 1) {
    super(code, message, status, details);
    this.retryAfter = retryAfter;
  }
}

type ErrorClass = new (code: string, message: string, status: number, details: ErrorDetails) => ZeroLockError;

const BY_CODE: Record<string, ErrorClass> = {
  STALE_VERSION: StaleCommitError,
  READ_SET_STALE: ReadSetStaleError,
  APPROVAL_REQUIRED: IrreversibleShardError,
  APPROVAL_INVALID: ApprovalInvalidError,
  SCHEMA_VIOLATION: SchemaViolationError,
  SELF_APPROVAL: SelfApprovalError,
  FENCED: FencedError,
  RESERVATION_CONFLICT: ReservationConflictError,
  // Its status says as much; named so the mapping does not hang on the status alone.
  RESERVATION_NOT_FOUND: NotFoundError,
  RATE_LIMITED: RateLimitedError,
};

const BY_STATUS: Record<number, ErrorClass> = {
  400: ValidationError,
  401: AuthenticationError,
  403: PermissionDeniedError,
  404: NotFoundError,
  409: ConflictError,
  422: ValidationError,
  429: RateLimitedError,
};

/** The error an answer stands for: by the envelope's code, else by the status. */
export function errorFrom(status: number, body: unknown, retryAfter?: string | null): ZeroLockError {
  const envelope =
    body !== null && typeof body === "object" ? (body as { error?: unknown }).error : undefined;
  if (envelope === null || typeof envelope !== "object") {
    return new ZeroLockError("HTTP_ERROR", `HTTP ${status}`, status);
  }
  const { code: rawCode, message: rawMessage, ...details } = envelope as Record<string, unknown>;
  const code = typeof rawCode === "string" ? rawCode : "HTTP_ERROR";
  const message = typeof rawMessage === "string" ? rawMessage : "";
  const cls = BY_CODE[code] ?? BY_STATUS[status] ?? ZeroLockError;
  if (cls === RateLimitedError) {
    const seconds = Number(retryAfter ?? details["retry_after"] ?? 1);
    return new RateLimitedError(code, message, status, details, Number.isFinite(seconds) ? seconds : 1);
  }
  return new cls(code, message, status, details);
}
