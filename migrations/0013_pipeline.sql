-- Statements that travel in the same round trip as COMMIT (the request's audit row and
-- idempotency record; see internal/pg.Session.AtCommit) cannot be checked by the client
-- before COMMIT runs: they must fail on the server to stop it. strata_expect_rows raises a
-- serialization failure (40001: the application answers 409, retry) when a statement
-- affected another number of rows than expected.
CREATE OR REPLACE FUNCTION strata_expect_rows(got bigint, want bigint, what text) RETURNS bigint
  LANGUAGE plpgsql AS $$
BEGIN
  IF got IS DISTINCT FROM want THEN
    RAISE EXCEPTION '% affected % rows, expected %', what, got, want USING ERRCODE = '40001';
  END IF;
  RETURN got;
END $$;
