export { Strata } from "./client.js";
export type { StrataOptions, RequestOptions, ApiResponse, RetryInfo } from "./client.js";
export { DurableJob } from "./durable.js";
export type { DurableJobOptions, StepOptions, StepContext, OnceOptions } from "./durable.js";
export {
  StrataError,
  ValidationError,
  AuthError,
  NotFoundError,
  ConflictError,
  PreconditionError,
  RateLimitError,
  UnavailableError,
  LeaseLostError,
  StepBusyError,
  ManualReview,
  manualReview,
  kindOf,
} from "./errors.js";
export type { ErrorKind, FieldError, Problem } from "./errors.js";
export type * from "./types.js";
