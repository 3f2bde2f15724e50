package io.oteldelta.testing;

import java.io.File;
import java.io.IOException;
import java.net.URI;
import java.net.URISyntaxException;
import org.apache.hadoop.conf.Configuration;
import org.apache.hadoop.fs.ChecksumFs;
import org.apache.hadoop.fs.DelegateToFileSystem;
import org.apache.hadoop.fs.Path;
import org.apache.hadoop.fs.RawLocalFileSystem;

/**
 * TEST ONLY (tests/spark/test_commit_race.py): Hadoop's local FileContext file system, except
 * that a rename pauses between its "destination exists?" check and the rename itself.
 *
 * <p>Delta's default store for file:// tables (HDFSLogStore) commits with exactly that
 * check-then-rename; the pause (otel.test.renamePauseMillis) widens its race window from
 * microseconds to a length a test can hit every time, without changing its logic.
 */
public class SlowRenameLocalFs extends ChecksumFs {

    public SlowRenameLocalFs(URI uri, Configuration conf) throws IOException, URISyntaxException {
        super(new SlowRawLocalFs(uri, conf));
    }

    static final class SlowRawLocalFs extends DelegateToFileSystem {
        private final long pauseMillis;

        SlowRawLocalFs(URI uri, Configuration conf) throws IOException, URISyntaxException {
            super(uri, new RawLocalFileSystem(), conf, "file", false);
            pauseMillis = conf.getLong("otel.test.renamePauseMillis", 0);
        }

        /**
         * Called by AbstractFileSystem after it checked that the destination is absent. While
         * paused, a hidden marker ".<name>.rename-window" shows the test that the window is open.
         */
        @Override
        public void renameInternal(Path src, Path dst) throws IOException {
            if (pauseMillis <= 0 || dst.getName().endsWith(".crc")) {
                super.renameInternal(src, dst);
                return;
            }
            File directory = new File(dst.toUri()).getParentFile();
            File marker = new File(directory, "." + dst.getName() + ".rename-window");
            marker.createNewFile();
            try {
                Thread.sleep(pauseMillis);
                super.renameInternal(src, dst);
            } catch (InterruptedException e) {
                Thread.currentThread().interrupt();
                throw new IOException("interrupted", e);
            } finally {
                marker.delete();
            }
        }

        @Override
        public int getUriDefaultPort() {
            return -1;
        }

        @Override
        public boolean isValidName(String src) {
            return true;
        }
    }
}
