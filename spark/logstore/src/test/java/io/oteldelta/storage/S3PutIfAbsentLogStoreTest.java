package io.oteldelta.storage;

import static org.junit.jupiter.api.Assertions.assertEquals;

import org.apache.hadoop.conf.Configuration;
import org.junit.jupiter.api.Test;
import software.amazon.awssdk.core.exception.SdkClientException;
import software.amazon.awssdk.regions.Region;
import software.amazon.awssdk.regions.providers.AwsRegionProvider;
import software.amazon.awssdk.services.s3.S3Client;

/** Which region the commit client signs for: a wrong one fails every Spark commit. */
class S3PutIfAbsentLogStoreTest {

    private static final AwsRegionProvider NOWHERE =
            () -> {
                throw SdkClientException.create("no region set");
            };

    @Test
    void configuredRegionWins() {
        assertEquals(Region.AP_SOUTH_1, S3PutIfAbsentLogStore.region("ap-south-1", () -> Region.EU_WEST_1));
    }

    @Test
    void withoutOneTheEnvironmentsRegionIsUsed() {
        assertEquals(Region.EU_WEST_1, S3PutIfAbsentLogStore.region(null, () -> Region.EU_WEST_1));
        assertEquals(Region.EU_WEST_1, S3PutIfAbsentLogStore.region("", () -> Region.EU_WEST_1));
    }

    @Test
    void usEast1OnlyWhenNoneIsSetAnywhere() {
        assertEquals(Region.US_EAST_1, S3PutIfAbsentLogStore.region(null, NOWHERE));
    }

    /** The SDK's own lookup, as a deployment sets it (AWS_REGION; here its property twin). */
    @Test
    void theClientTakesTheRegionTheSdkFinds() {
        String before = System.getProperty("aws.region");
        System.setProperty("aws.region", "eu-west-1");
        try {
            Configuration conf = new Configuration(false);
            conf.set("fs.s3a.access.key", "key");
            conf.set("fs.s3a.secret.key", "secret");
            S3Client client = S3PutIfAbsentLogStore.client("region-from-environment", conf);
            assertEquals(Region.EU_WEST_1, client.serviceClientConfiguration().region());

            conf.set("fs.s3a.bucket.region-from-config.endpoint.region", "ap-south-1");
            S3Client configured = S3PutIfAbsentLogStore.client("region-from-config", conf);
            assertEquals(Region.AP_SOUTH_1, configured.serviceClientConfiguration().region());
        } finally {
            if (before == null) {
                System.clearProperty("aws.region");
            } else {
                System.setProperty("aws.region", before);
            }
        }
    }
}
