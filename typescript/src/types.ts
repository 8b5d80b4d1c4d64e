/**
 * The wire types the client speaks, taken from src/schema.gen.ts (generated from
 * the server's OpenAPI document), so a change to the server's contract shows up
 * here as a type error rather than a silent drift. Where the document leaves an
 * answer untyped (leases, a transaction's answer), the shape is written out below
 * from docs/api.md and says so.
 */
import type { components } from "./schema.gen.js";

type Schemas = components["schemas"];

/** Any JSON value. */
export type JsonValue = Schemas["JsonValue"] | null;

/**
 * The document marks a response's model fields that have defaults as optional
 * (drf-spectacular's reading of the serializers), though the server always sends
 * them; the few the SDK and its callers rely on are made required here.
 */
type Sent<T, K extends keyof T> = T & Required<Pick<T, K>>;

export type Shard = Sent<Schemas["Shard"], "version" | "value" | "reversible" | "owner_policy">;
export type ShardType = Schemas["TypeEnum"];
export type CrdtType = Schemas["CrdtTypeEnum"];
export type OwnerPolicy = Schemas["OwnerPolicyEnum"];
export type CommitResult = Schemas["CommitResult"];
export type ClaimedTask = Schemas["ClaimResult"];
export type Approval = Sent<Schemas["Approval"], "id" | "status">;
export type ApprovalStatus = Schemas["StatusEnum"];
export type Reservation = Schemas["Reservation"];
export type HistoryEntry = Schemas["HistoryEntry"];

/** The body of POST /api/txn (the document's first branch: the others only say "at least one"). */
export type TxnRequest = Extract<Schemas["Txn"], { fence?: unknown }>;
/** One operation of a transaction (get, put, delete, append), as the document types it. */
export type TxnOperation = NonNullable<TxnRequest["success"]>[number];
/**
 * One compare. The document's union ends in an open alternative (a compare's
 * "value is required unless exists/not_exists" rule), which makes its generated
 * type `unknown`; the two shapes of docs/api.md are spelled out here instead.
 */
export type TxnCompare =
  | { shard_id: string; version: number }
  | {
      shard_id: string;
      path?: (string | number)[];
      op: "==" | "!=" | "<" | ">" | "exists" | "not_exists";
      value?: unknown;
    };

/** POST /api/txn's answer (untyped in the OpenAPI document; docs/api.md "Transactions"). */
export interface TxnResult {
  succeeded: boolean;
  /** Absent when asked for a minimal answer. */
  responses?: TxnResponseItem[];
  versions: Record<string, number>;
  revision: number | null;
}

/** One item of a transaction's `responses`: a `get` carries `found`, `value`, `version`. */
export interface TxnResponseItem {
  op: "get" | "put" | "delete" | "append";
  shard_id: string;
  path?: (string | number)[];
  found?: boolean;
  value?: unknown;
  version?: number;
  value_omitted?: boolean;
}

/** A lease (untyped in the OpenAPI document; docs/api.md "Leases"). */
export interface Lease {
  lease_id: string;
  ttl_seconds: number;
  expires_at: string;
  fence: number;
  holder: string;
  session: boolean;
}

/** What claimTask / claimNext answer: whether the task is now this agent's, and who holds it. */
export interface ClaimResult {
  taskId: string;
  claimed: boolean;
  holder: string | null;
  task?: Record<string, unknown> | null;
  version?: number;
}

/** A pending task of a queue shard, as getPendingTasks lists them. */
export interface Task {
  id: string;
  data: Record<string, unknown>;
}
