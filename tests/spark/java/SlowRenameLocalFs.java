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
 * that a rename pauses after its last "destination exists?" check, right before rename(2).
 *
 * <p>Delta's default store for file:// tables (HDFSLogStore) commits with FileContext.rename
 * without overwrite, which is exactly such a check followed by a replacing rename(2). The pause
 * (Hadoop conf otel.test.renamePauseMillis) widens that window from microseconds to a length a
 * test can hit every time, without changing any of its logic. While paused, a hidden marker
 * ".&lt;name&gt;.rename-window" next to the destination tells the test the window is open.
 */
public class SlowRenameLocalFs extends ChecksumFs {

    public SlowRenameLocalFs(URI uri, Configuration conf) throws IOException, URISyntaxException {
        super(new Raw(uri, conf));
    }

    /** Like Hadoop's RawLocalFs (whose constructor is not public), over the pausing FileSystem. */
    static final class Raw extends DelegateToFileSystem {
        Raw(URI uri, Configuration conf) throws IOException, URISyntaxException {
            super(uri, new PausingRawLocalFileSystem(conf), conf, "file", false);
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

    /**
     * FileSystem.rename(src, dst, NONE) checks that dst is absent, then calls this; the pause
     * sits between that check and the rename(2) that replaces whatever appeared meanwhile.
     */
    static final class PausingRawLocalFileSystem extends RawLocalFileSystem {
        private final long pauseMillis;

        PausingRawLocalFileSystem(Configuration conf) {
            pauseMillis = conf.getLong("otel.test.renamePauseMillis", 0);
        }

        @Override
        public boolean rename(Path src, Path dst) throws IOException {
            if (pauseMillis <= 0 || dst.getName().endsWith(".crc")) {
                return super.rename(src, dst);
            }
            File directory = pathToFile(dst).getParentFile();
            File marker = new File(directory, "." + dst.getName() + ".rename-window");
            marker.createNewFile();
            try {
                Thread.sleep(pauseMillis);
                return super.rename(src, dst);
            } catch (InterruptedException e) {
                Thread.currentThread().interrupt();
                throw new IOException("interrupted", e);
            } finally {
                marker.delete();
            }
        }
    }
}
