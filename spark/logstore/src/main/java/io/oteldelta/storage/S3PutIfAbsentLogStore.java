package io.oteldelta.storage;

import io.delta.storage.HadoopFileSystemLogStore;
import java.io.ByteArrayOutputStream;
import java.io.IOException;
import java.net.URI;
import java.nio.charset.StandardCharsets;
import java.nio.file.FileAlreadyExistsException;
import java.util.Iterator;
import java.util.Map;
import java.util.concurrent.ConcurrentHashMap;
import org.apache.hadoop.conf.Configuration;
import org.apache.hadoop.fs.Path;
import software.amazon.awssdk.auth.credentials.AwsBasicCredentials;
import software.amazon.awssdk.auth.credentials.AwsCredentialsProvider;
import software.amazon.awssdk.auth.credentials.AwsSessionCredentials;
import software.amazon.awssdk.auth.credentials.DefaultCredentialsProvider;
import software.amazon.awssdk.auth.credentials.StaticCredentialsProvider;
import software.amazon.awssdk.core.sync.RequestBody;
import software.amazon.awssdk.core.exception.SdkClientException;
import software.amazon.awssdk.regions.Region;
import software.amazon.awssdk.regions.providers.AwsProfileRegionProvider;
import software.amazon.awssdk.regions.providers.AwsRegionProvider;
import software.amazon.awssdk.regions.providers.AwsRegionProviderChain;
import software.amazon.awssdk.regions.providers.SystemSettingsRegionProvider;
import software.amazon.awssdk.services.s3.S3Client;
import software.amazon.awssdk.services.s3.S3ClientBuilder;
import software.amazon.awssdk.services.s3.model.PutObjectRequest;
import software.amazon.awssdk.services.s3.model.S3Exception;

/**
 * A Delta {@code LogStore} for {@code s3://} and {@code s3a://} tables that publishes commits
 * with an S3 conditional write ({@code PUT} with {@code If-None-Match: *}).
 *
 * <p>Why: Spark's S3 store ({@code S3SingleDriverLogStore}) checks that commit N does not exist
 * and then PUTs it; its lock covers one driver only. delta-rs 1.x commits to the same tables
 * with a conditional PUT, so when both write one table, Spark's check-then-put can replace a
 * commit delta-rs has just published: an acknowledged commit is lost. With this store both
 * engines ask S3 for the same thing — create this object only if it does not exist — and S3
 * picks one winner per version. The loser gets {@link FileAlreadyExistsException}, which Delta
 * answers by checking the winning commit for conflicts and retrying at the next version.
 *
 * <p>{@code overwrite=true} ({@code _last_checkpoint}) is a plain PUT. Reads and listings are
 * Hadoop's S3A (inherited). The S3 client is built from the same {@code fs.s3a.*} settings as
 * S3A: endpoint, region, path-style access, keys (or the default AWS credential chain).
 * Without {@code fs.s3a.endpoint.region} the region is the one the AWS SDK finds in the
 * environment ({@code AWS_REGION}, the {@code aws.region} property, the profile), as delta-rs
 * finds it, and the client follows a bucket that lives elsewhere (cross-region access).
 */
public class S3PutIfAbsentLogStore extends HadoopFileSystemLogStore {

    private static final Map<String, S3Client> CLIENTS = new ConcurrentHashMap<>();
    /** The region of last resort, as the SDK's own S3 examples and delta-rs use. */
    static final Region FALLBACK_REGION = Region.US_EAST_1;

    /**
     * The SDK's region lookup without its last step, the EC2 instance metadata service: off
     * EC2 that step waits for a connection timeout on every new client, and cross-region access
     * covers a bucket the guess misses.
     */
    private static final AwsRegionProvider ENVIRONMENT_REGION =
            new AwsRegionProviderChain(
                    new SystemSettingsRegionProvider(), new AwsProfileRegionProvider());

    public S3PutIfAbsentLogStore(Configuration initHadoopConf) {
        super(initHadoopConf);
    }

    @Override
    public void write(
            Path path, Iterator<String> actions, Boolean overwrite, Configuration hadoopConf)
            throws IOException {
        URI uri = path.toUri();
        String bucket = uri.getHost();
        String key = uri.getPath().startsWith("/") ? uri.getPath().substring(1) : uri.getPath();
        PutObjectRequest.Builder request = PutObjectRequest.builder().bucket(bucket).key(key);
        if (!overwrite) {
            request.ifNoneMatch("*");
        }
        try {
            client(bucket, hadoopConf).putObject(request.build(), RequestBody.fromBytes(lines(actions)));
        } catch (S3Exception e) {
            // 412: the version exists; 409: another conditional PUT of it is in flight
            if (!overwrite && (e.statusCode() == 412 || e.statusCode() == 409)) {
                throw new FileAlreadyExistsException(path.toString());
            }
            throw new IOException("conditional PUT of " + path + " failed: " + e.getMessage(), e);
        }
    }

    /** S3 never shows a partial object: Delta may write checkpoints in place. */
    @Override
    public Boolean isPartialWriteVisible(Path path, Configuration hadoopConf) {
        return false;
    }

    private static byte[] lines(Iterator<String> actions) {
        ByteArrayOutputStream out = new ByteArrayOutputStream();
        while (actions.hasNext()) {
            out.writeBytes(actions.next().getBytes(StandardCharsets.UTF_8));
            out.write('\n');
        }
        return out.toByteArray();
    }

    private static String setting(Configuration conf, String bucket, String name) {
        String perBucket = conf.getTrimmed("fs.s3a.bucket." + bucket + "." + name);
        return perBucket != null ? perBucket : conf.getTrimmed("fs.s3a." + name);
    }

    static S3Client client(String bucket, Configuration conf) {
        String endpoint = setting(conf, bucket, "endpoint");
        String region = setting(conf, bucket, "endpoint.region");
        String accessKey = setting(conf, bucket, "access.key");
        String secretKey = setting(conf, bucket, "secret.key");
        String token = setting(conf, bucket, "session.token");
        boolean pathStyle = Boolean.parseBoolean(setting(conf, bucket, "path.style.access"));
        String ssl = setting(conf, bucket, "connection.ssl.enabled");
        String cacheKey = String.join("|", bucket, "" + endpoint, "" + region, "" + accessKey, "" + pathStyle);
        return CLIENTS.computeIfAbsent(
                cacheKey,
                k -> {
                    S3ClientBuilder builder = S3Client.builder().forcePathStyle(pathStyle);
                    boolean configured = region != null && !region.isEmpty();
                    builder.region(region(region, ENVIRONMENT_REGION));
                    // an unconfigured region is a guess: a bucket elsewhere answers with its
                    // own, and the client retries there (without it every commit fails: 301)
                    builder.crossRegionAccessEnabled(!configured);
                    if (endpoint != null && !endpoint.isEmpty()) {
                        String scheme = "false".equalsIgnoreCase(ssl) ? "http://" : "https://";
                        builder.endpointOverride(
                                URI.create(endpoint.contains("://") ? endpoint : scheme + endpoint));
                    }
                    builder.credentialsProvider(credentials(accessKey, secretKey, token));
                    return builder.build();
                });
    }

    /**
     * The configured region ({@code fs.s3a.endpoint.region}); else the environment's (a bridge
     * deployed with {@code AWS_REGION=eu-west-1} commits there, as its delta-rs writer does);
     * else {@link #FALLBACK_REGION}.
     */
    static Region region(String configured, AwsRegionProvider environment) {
        if (configured != null && !configured.isEmpty()) {
            return Region.of(configured);
        }
        try {
            return environment.getRegion();
        } catch (SdkClientException e) { // none set anywhere
            return FALLBACK_REGION;
        }
    }

    private static AwsCredentialsProvider credentials(String accessKey, String secretKey, String token) {
        if (accessKey == null || accessKey.isEmpty() || secretKey == null) {
            return DefaultCredentialsProvider.builder().build();
        }
        if (token != null && !token.isEmpty()) {
            return StaticCredentialsProvider.create(AwsSessionCredentials.create(accessKey, secretKey, token));
        }
        return StaticCredentialsProvider.create(AwsBasicCredentials.create(accessKey, secretKey));
    }
}
