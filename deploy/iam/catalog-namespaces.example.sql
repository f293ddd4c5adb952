-- Data namespaces at the catalog layer: which Iceberg namespaces each role may see.
--
-- The Iceberg SQL catalog on Postgres (FM_CATALOG_URI) keeps one row per table in
-- `iceberg_tables` and one per namespace property in `iceberg_namespace_properties`. Row-level
-- security on both makes every namespace a role may not read invisible to it: loading
-- `fm_on_device.raw_documents` as `fm_analysts_cloud` fails as if the table did not exist, and
-- listing namespaces does not show it. The platform's role owns these tables, so the policies
-- do not apply to it. Run this as their owner once the platform has created the catalog (the
-- first `fm` command does); the roles are logins the deployment makes.
--
-- `fm` holds the platform-wide tables (shard_sets, dataset_versions, the registries);
-- `fm_<namespace>`, hyphens as underscores, holds one data namespace's documents and everything
-- derived from them (docs/provenance.md). deploy/iam/namespaces.example.json keeps the same
-- roles to the same data in the bucket (`<warehouse>/fm_<namespace>/`): the catalog names the
-- files, the bucket policy guards them. tests/test_namespace_catalog_policy.py runs this file.

ALTER TABLE iceberg_tables ENABLE ROW LEVEL SECURITY;
ALTER TABLE iceberg_namespace_properties ENABLE ROW LEVEL SECURITY;
GRANT SELECT ON iceberg_tables, iceberg_namespace_properties
    TO fm_trainers_cloud, fm_trainers_on_device, fm_analysts_cloud;

-- Trainers resolve shard sets (`make_dataset("web@v3")` reads fm.shard_sets) and nothing else;
-- which shard sets they may read is the bucket policy's prefixes.
CREATE POLICY trainers_read_the_platform_namespace ON iceberg_tables FOR SELECT
    TO fm_trainers_cloud, fm_trainers_on_device
    USING (table_namespace = 'fm');
CREATE POLICY trainers_read_the_platform_namespace ON iceberg_namespace_properties FOR SELECT
    TO fm_trainers_cloud, fm_trainers_on_device
    USING (namespace = 'fm');

-- Analysts of cloud data read its tables: documents, quarantine, dedup indexes, lineage.
CREATE POLICY cloud_analysts_read_cloud ON iceberg_tables FOR SELECT
    TO fm_analysts_cloud
    USING (table_namespace IN ('fm', 'fm_cloud'));
CREATE POLICY cloud_analysts_read_cloud ON iceberg_namespace_properties FOR SELECT
    TO fm_analysts_cloud
    USING (namespace IN ('fm', 'fm_cloud'));
